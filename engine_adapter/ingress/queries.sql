-- The named queries of engine_adapter.ingress: a block is `-- name --`, a comment line, then
-- the query (store/db.py loads every part's queries.sql; a name is unique across them).

-- webhook_trigger --
-- The trigger a webhook path names, with whether its workflow is enabled and, for a webhook
-- that delivers an outside event rather than start a run, the event and its key expression.
select t.path, t.workflow, t.secret, t.map, w.enabled,
       h ->> 'event' as event, h ->> 'key' as event_key
  from threadline.webhook_triggers t
  join threadline.workflows w on w.slug = t.workflow
  left join lateral jsonb_array_elements(w.recipe -> 'webhooks') h on h ->> 'path' = t.path
 where t.path = %(path)s

-- list_webhook_triggers --
-- Every webhook path, its workflow and whether it has a secret.
select t.path, t.workflow, t.secret is not null as signed, w.enabled
  from threadline.webhook_triggers t
  join threadline.workflows w on w.slug = t.workflow
 order by t.path

-- webhook_delivery_seen --
-- The earlier delivery this one repeats: the same delivery id at this path, or the same signature
-- resent to any path (a match at this path first).
select run_id, delivery, path
  from threadline.webhook_deliveries
 where (path = %(path)s and delivery = %(delivery)s) or signature = %(signature)s
 order by path = %(path)s desc
 limit 1

-- insert_webhook_delivery --
-- Record an accepted delivery, for the run its path and delivery started (migration 032); nothing
-- when a concurrent one with its id or signature won.
select r.run_id
  from threadline.record_webhook_delivery(%(path)s, %(delivery)s, %(signature)s,
                                          %(run_id)s::uuid, %(caller)s) r (run_id)
 where r.run_id is not null
