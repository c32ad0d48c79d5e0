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
-- The workflow's schedule, its row locked against other tickers and edits; nothing when it is
-- disabled or cleared.
select * from threadline.lock_scheduled_workflow(%(slug)s)

-- last_schedule_tick --
-- The last slot a workflow handled (a statement of its own after the lock: it sees what the
-- ticker that held the lock committed).
select max(slot) as slot from threadline.schedule_ticks where workflow = %(workflow)s

-- insert_schedule_tick --
-- The slot row; nothing when this slot (or a later one) was handled already (migration 044).
select slot from threadline.take_schedule_slot(%(workflow)s, %(slot)s, %(skipped)s)

-- set_schedule_tick_run --
-- The run a slot fired.
select threadline.set_schedule_slot_run(%(workflow)s, %(slot)s, %(run_id)s)

-- event_workflows --
-- Enabled workflows started by an event name.
select slug from threadline.workflows
 where recipe ? 'on_event' and recipe ->> 'on_event' = %(name)s and enabled
 order by slug

-- lock_admission --
-- The workflow's admission lock, until commit (see migration 002).
select threadline.lock_admission(%(workflow)s)

-- admit_queued --
-- Admit the workflow's first queued runs in line while it has room (see migration 002).
select threadline.admit_queued(%(queue)s, %(workflow)s) as admitted

-- workflows_with_queued_runs --
-- Workflows that have runs waiting for admission (the reconcile sweep re-admits them).
select distinct workflow from threadline.run_threads where state = 'queued'

-- set_workflow_enabled --
-- Enable or disable a workflow; disabling stops its schedule, events and webhooks at once.
select * from threadline.set_workflow_enabled(%(slug)s, %(enabled)s)
