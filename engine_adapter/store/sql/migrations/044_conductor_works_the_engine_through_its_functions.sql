-- The conductor's login writes no table of Absurd's: the engine's SDK (and Threadline's own
-- engine queries) only ever call Absurd's functions, never its tables, so the functions the
-- conductor calls run as their owner and the conductor executes only those. Absurd's tables are
-- left exactly as Absurd made them.
--
--   * The functions made security definer are the ones that write what the conductor works: a
--     run claimed, its lease extended, completed, failed or rescheduled, a checkpoint written, an
--     event awaited or emitted, a task cancelled. Each runs with a fixed search_path.
--   * A definer function does for whoever executes it what its owner may: so the console's
--     login, which held EXECUTE on every routine of Absurd's (but wrote neither its checkpoints
--     nor its events), keeps none of them: it cancels and retries through migration 045's checked
--     functions; the ingress, the bots and the viewer execute none of them either.
--   * The conductor keeps only the routines of Absurd's it calls; a process's row in
--     threadline.workers is written only through migration 043's functions.
--   * The notification outbox and the schedule's slots are written only through the checked
--     functions at the end: a notification whose resume links decide as an account goes only to
--     a channel that account registered (a login that could queue one to any address could have
--     an approver's link sent to itself), a slot only of an enabled scheduled workflow, and its
--     run only one that slot's schedule started.
--   * A resume link is issued by the conductor only for the subject of a notification queued for
--     that gate (so only to a channel its subject registered), for at most a week; a cleanup is
--     recorded only by a live conductor, and finished once.

do $$
declare
  v_fn regprocedure;
begin
  foreach v_fn in array array[
    'absurd.await_event(text, uuid, uuid, text, text, integer)',
    'absurd.cancel_task(text, uuid)',
    'absurd.claim_task(text, text, integer, integer)',
    'absurd.complete_run(text, uuid, jsonb)',
    'absurd.emit_event(text, text, jsonb)',
    'absurd.extend_claim(text, uuid, integer)',
    'absurd.fail_run(text, uuid, jsonb, timestamptz)',
    'absurd.retry_task(text, uuid, jsonb)',
    'absurd.schedule_run(text, uuid, timestamptz)',
    'absurd.set_task_checkpoint_state(text, uuid, text, jsonb, uuid, integer)'
  ]::regprocedure[]
  loop
    execute format('alter function %s security definer set search_path = pg_catalog, pg_temp',
                   v_fn);
  end loop;
end;
$$;

-- The conductor: Absurd's tables read, written only through the functions above.
revoke insert, update, delete, truncate on all tables in schema absurd from threadline_conductor;
revoke all on function absurd.cleanup_all_queues (text), absurd.cleanup_events (text, integer, integer),
  absurd.cleanup_tasks (text, integer, integer), absurd.create_queue (text),
  absurd.create_queue (text, text), absurd.disable_cron (text),
  absurd.drop_detached_partition (text, text), absurd.drop_queue (text),
  absurd.enable_cron (text, text, text, text), absurd.ensure_partitions (text),
  absurd.ensure_queue_tables (text), absurd.get_queue_policy (text),
  absurd.list_detach_candidates (text), absurd.list_queues (),
  absurd.partition_week_tag (timestamptz), absurd.portable_uuidv7 (),
  absurd.retry_delay_seconds (jsonb, integer), absurd.retry_task (text, uuid, jsonb),
  absurd.schedule_detach_jobs (text), absurd.set_queue_policy (text, jsonb),
  absurd.spawn_task (text, text, jsonb, jsonb), absurd.uuidv7_floor (timestamptz),
  absurd.uuidv7_timestamp (uuid), absurd.week_bucket_utc (timestamptz)
  from threadline_conductor;

-- The console: none of the definer functions it does not call.
revoke all on function absurd.await_event (text, uuid, uuid, text, text, integer),
  absurd.claim_task (text, text, integer, integer), absurd.complete_run (text, uuid, jsonb),
  absurd.emit_event (text, text, jsonb), absurd.extend_claim (text, uuid, integer),
  absurd.fail_run (text, uuid, jsonb, timestamptz), absurd.schedule_run (text, uuid, timestamptz),
  absurd.set_task_checkpoint_state (text, uuid, text, jsonb, uuid, integer)
  from threadline_console;
-- Nor cancel or retry: a run's task is cancelled or retried through threadline.cancel_run_task
-- and retry_run_task (migration 045), which check who asks; the engine's own, now run as their
-- owner, would not. The conductor cancels through cancel_run_task too.
revoke all on function absurd.cancel_task (text, uuid), absurd.retry_task (text, uuid, jsonb)
  from threadline_console, threadline_conductor;

-- Process rows: only through register_worker and beat_worker (migration 043); dead ones are
-- pruned by threadline.prune_dead_workers.
revoke insert, update, delete on threadline.workers from threadline_conductor;
revoke all on sequence threadline.worker_lock_keys from threadline_conductor;

-- One notification in the outbox (once per event, rule and target), for a run's own step; one
-- with a subject only to a channel that live account registered.
create function threadline.enqueue_notification (
  p_run_id uuid, p_event text, p_event_key text, p_rule integer, p_channel text, p_target text,
  p_subject text, p_text text
)
  returns void
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  if threadline.caller_kind() not in ('owner', 'conductor') then
    perform threadline.refuse('queueing a notification');
  end if;
  if not starts_with(p_event_key, p_run_id::text || ':') then
    raise exception 'event_key % is not a step of run %', p_event_key, p_run_id
      using errcode = '22023';
  end if;
  if p_subject is not null and not exists (
       select 1 from threadline.accounts a
         join threadline.account_channels c on c.account_id = a.id
        where a.name = p_subject and a.removed_at is null
          and c.channel = p_channel and c.target = p_target) then
    perform threadline.refuse(format('sending %s''s links to a %s it did not register',
                                     p_subject, p_channel));
  end if;
  insert into threadline.notifications
    (run_id, event, event_key, rule, channel, target, subject, text)
  values (p_run_id, p_event, p_event_key, p_rule, p_channel, p_target, p_subject, p_text)
  on conflict (event, event_key, rule, target) do nothing;
end;
$$;

-- Due notifications, leased to the caller for p_lease_s seconds (at most an hour).
create function threadline.claim_notifications (p_lease_s double precision, p_limit integer)
  returns table (id bigint, run_id uuid, event text, event_key text, channel text, target text,
                 subject text, text text, attempts integer)
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
begin
  if threadline.caller_kind() not in ('owner', 'conductor') then
    perform threadline.refuse('sending notifications');
  end if;
  if p_lease_s is null or p_lease_s <= 0 or p_lease_s > 3600 or p_limit not between 1 and 1000
  then
    raise exception 'lease_s must be within (0, 3600] and limit within [1, 1000], not % and %',
      p_lease_s, p_limit using errcode = '22023';
  end if;
  return query
  update threadline.notifications n
     set attempts = n.attempts + 1, next_at = now() + make_interval(secs => p_lease_s)
   where n.id in (select d.id from threadline.notifications d
                   where d.status = 'pending' and d.next_at <= now()
                   order by d.id limit p_limit
                   for update skip locked)
  returning n.id, n.run_id, n.event, n.event_key, n.channel, n.target, n.subject, n.text,
            n.attempts;
end;
$$;

-- A pending notification sent, or failed (tried again after p_backoff_s, or given up); returns
-- its id, nothing when it was no longer pending.
create function threadline.notification_done (
  p_id bigint, p_sent boolean, p_give_up boolean, p_backoff_s double precision, p_error text
)
  returns table (id bigint)
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
begin
  if threadline.caller_kind() not in ('owner', 'conductor') then
    perform threadline.refuse('sending notifications');
  end if;
  return query
  update threadline.notifications n
     set status = case when p_sent then 'sent' when p_give_up then 'failed' else 'pending' end,
         sent_at = case when p_sent then now() end,
         next_at = case when p_sent then n.next_at
                        else now() + make_interval(secs => p_backoff_s) end,
         last_error = case when p_sent then null else p_error end
   where n.id = p_id and n.status = 'pending'
  returning n.id;
end;
$$;

-- A schedule's slot (nothing when it, or a later one, was handled already), of an enabled
-- workflow that has a schedule.
create function threadline.take_schedule_slot (p_workflow text, p_slot timestamptz,
                                               p_skipped integer)
  returns table (slot timestamptz)
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
begin
  if threadline.caller_kind() not in ('owner', 'conductor') then
    perform threadline.refuse('taking a schedule slot');
  end if;
  if not exists (select 1 from threadline.workflows w
                  where w.slug = p_workflow and w.enabled and w.schedule is not null) then
    perform threadline.refuse(format('taking a slot of %s, which has no enabled schedule',
                                     p_workflow));
  end if;
  return query
  insert into threadline.schedule_ticks as t (workflow, slot, skipped)
  select p_workflow, p_slot, p_skipped
   where not exists (select 1 from threadline.schedule_ticks k
                      where k.workflow = p_workflow and k.slot >= p_slot)
  on conflict (workflow, slot) do nothing
  returning t.slot;
end;
$$;

-- The run a slot fired: a run of that workflow a schedule started, for a slot with none yet.
create function threadline.set_schedule_slot_run (p_workflow text, p_slot timestamptz,
                                                  p_run_id uuid)
  returns void
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  if threadline.caller_kind() not in ('owner', 'conductor') then
    perform threadline.refuse('recording a schedule''s run');
  end if;
  if not exists (select 1 from threadline.run_threads r
                  where r.run_id = p_run_id and r.workflow = p_workflow
                    and r.trigger ->> 'kind' = 'schedule') then
    perform threadline.refuse(format('recording run %s as a slot of %s', p_run_id, p_workflow));
  end if;
  update threadline.schedule_ticks set run_id = p_run_id
   where workflow = p_workflow and slot = p_slot and run_id is null;
end;
$$;

-- A resume link's hash, for a gate of the run and the subject of a notification queued for it
-- (the owner's login, the CLI's, may issue one for anyone). Returns when it expires.
create function threadline.issue_resume_token (
  p_token_hash text, p_run_id uuid, p_gate_key text, p_subject text, p_via text,
  p_ttl_s double precision
)
  returns timestamptz
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  v_expires timestamptz;
begin
  if threadline.caller_kind() = 'conductor' then
    if not exists (select 1 from threadline.notifications n
                    where n.run_id = p_run_id and n.event_key = p_gate_key
                      and n.subject = p_subject) then
      perform threadline.refuse(format('issuing a resume link as %s for %s', p_subject,
                                       p_gate_key));
    end if;
  elsif threadline.caller_kind() <> 'owner' then
    perform threadline.refuse('issuing a resume link');
  end if;
  if p_ttl_s is null or p_ttl_s <= 0 or p_ttl_s > 7 * 86400 then
    raise exception 'ttl_s must be within (0, 604800] seconds, not %', p_ttl_s
      using errcode = '22023';
  end if;
  insert into threadline.resume_tokens (token_hash, run_id, gate_key, subject, issued_via,
                                        expires_at)
  values (p_token_hash, p_run_id, p_gate_key, p_subject, p_via,
          now() + make_interval(secs => p_ttl_s))
  returning expires_at into v_expires;
  return v_expires;
end;
$$;

-- A cleanup begun, by a live conductor (or the owner's CLI); returns its id.
create function threadline.start_cleanup (p_by text) returns bigint
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  v_id bigint;
begin
  if threadline.caller_kind() = 'conductor' then
    if not exists (select 1 from threadline.live_workers
                    where id = p_by and kind = 'conductor') then
      perform threadline.refuse(format('recording a cleanup by %s', p_by));
    end if;
  elsif threadline.caller_kind() <> 'owner' then
    perform threadline.refuse('recording a cleanup');
  end if;
  insert into threadline.cleanups (by_worker) values (p_by) returning id into v_id;
  return v_id;
end;
$$;

-- A cleanup's end, once: what it removed, or its error.
create function threadline.finish_cleanup (
  p_id bigint, p_runs integer, p_outputs integer, p_events integer, p_workers integer,
  p_ticks integer, p_error text
)
  returns void
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  if threadline.caller_kind() not in ('owner', 'conductor') then
    perform threadline.refuse('recording a cleanup');
  end if;
  update threadline.cleanups
     set finished_at = now(), runs_removed = p_runs, outputs_removed = p_outputs,
         events_removed = p_events, workers_removed = p_workers, ticks_removed = p_ticks,
         error = p_error
   where id = p_id and finished_at is null;
  if not found then
    perform threadline.refuse(format('finishing cleanup %s again', p_id));
  end if;
end;
$$;

revoke all on function
  threadline.issue_resume_token (text, uuid, text, text, text, double precision),
  threadline.start_cleanup (text),
  threadline.finish_cleanup (bigint, integer, integer, integer, integer, integer, text)
  from public;
grant execute on function
  threadline.issue_resume_token (text, uuid, text, text, text, double precision),
  threadline.start_cleanup (text),
  threadline.finish_cleanup (bigint, integer, integer, integer, integer, integer, text)
  to threadline_conductor;
revoke insert, update, delete on threadline.resume_tokens, threadline.cleanups
  from threadline_conductor;
revoke all on sequence threadline.cleanups_id_seq from threadline_conductor;
-- Queueing a run (threadline.queue_run) and migrating are not the conductor's: the owner's.
revoke all on sequence threadline.run_queue_seq, threadline.schema_migrations_id_seq
  from threadline_conductor;

revoke all on function
  threadline.enqueue_notification (uuid, text, text, integer, text, text, text, text),
  threadline.claim_notifications (double precision, integer),
  threadline.notification_done (bigint, boolean, boolean, double precision, text),
  threadline.take_schedule_slot (text, timestamptz, integer),
  threadline.set_schedule_slot_run (text, timestamptz, uuid)
  from public;
grant execute on function
  threadline.enqueue_notification (uuid, text, text, integer, text, text, text, text),
  threadline.claim_notifications (double precision, integer),
  threadline.notification_done (bigint, boolean, boolean, double precision, text),
  threadline.take_schedule_slot (text, timestamptz, integer),
  threadline.set_schedule_slot_run (text, timestamptz, uuid)
  to threadline_conductor;
revoke insert, update, delete on threadline.notifications, threadline.schedule_ticks
  from threadline_conductor;
revoke all on sequence threadline.notifications_id_seq from threadline_conductor;
