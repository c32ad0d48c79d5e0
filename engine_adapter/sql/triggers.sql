-- scheduled_workflows --
-- Every workflow with a schedule, with the last slot it handled (fired or skipped).
select w.slug, w.schedule, w.timezone, w.enabled, w.schedule_enabled_at,
       coalesce(w.recipe ->> 'catch_up', 'latest') as catch_up,
       t.slot as last_slot, t.run_id as last_run_id
  from threadline.workflows w
  left join lateral (select slot, run_id from threadline.schedule_ticks
                      where workflow = w.slug order by slot desc limit 1) t on true
 where w.schedule is not null and (w.enabled or %(all)s)
 order by w.slug

-- lock_scheduled_workflow --
-- The workflow row, locked against other tickers and edits, if its schedule is still the one read.
select slug from threadline.workflows
 where slug = %(slug)s and enabled and schedule = %(schedule)s and timezone = %(timezone)s
   and schedule_enabled_at = %(enabled_at)s
   for no key update

-- insert_schedule_tick --
-- The slot row; nothing when this slot (or a later one) was handled already.
insert into threadline.schedule_ticks (workflow, slot, skipped)
select %(workflow)s, %(slot)s, %(skipped)s
 where not exists (select 1 from threadline.schedule_ticks
                    where workflow = %(workflow)s and slot >= %(slot)s)
on conflict (workflow, slot) do nothing
returning slot

-- set_schedule_tick_run --
-- The run a slot fired.
update threadline.schedule_ticks set run_id = %(run_id)s where workflow = %(workflow)s and slot = %(slot)s

-- event_workflows --
-- Enabled workflows started by an event name.
select slug from threadline.workflows
 where recipe ? 'on_event' and recipe ->> 'on_event' = %(name)s and enabled
 order by slug

-- mark_run_queued --
-- A new run of a workflow with a concurrency limit waits for admission.
update threadline.run_threads set state = 'queued', admitted_at = null where run_id = %(run_id)s

-- admit_queued --
-- Admit the workflow's oldest queued runs while it has room (see migration 002).
select threadline.admit_queued(%(queue)s, %(workflow)s) as admitted

-- queue_place --
-- Where a queued run stands: runs holding a place, runs ahead of it in line.
select (select count(*) from threadline.run_threads a
         where a.workflow = r.workflow and a.admitted_at is not null
           and a.state not in ('completed', 'failed', 'cancelled')) as active,
       (select count(*) from threadline.run_threads q
         where q.workflow = r.workflow and q.state = 'queued'
           and (q.created_at, q.run_id) < (r.created_at, r.run_id)) as ahead,
       r.state
  from threadline.run_threads r
 where r.run_id = %(run_id)s

-- workflows_with_queued_runs --
-- Workflows that have runs waiting for admission (the reconcile sweep re-admits them).
select distinct workflow from threadline.run_threads where state = 'queued'

-- set_workflow_enabled --
-- Enable or disable a workflow; disabling stops its schedule, events and webhooks at once.
update threadline.workflows set enabled = %(enabled)s, updated_at = now()
 where slug = %(slug)s
returning slug, enabled
