-- Triggers: schedules, events and concurrency limits.

-- When the workflow's current schedule took effect: set by the database itself whenever a schedule
-- appears, changes (cron or zone) or its workflow is enabled again, whoever writes the row, so
-- catch-up never fires slots from before a schedule existed or while it was disabled.
alter table threadline.workflows add column schedule_enabled_at timestamptz;
update threadline.workflows set schedule_enabled_at = absurd.current_time() where schedule is not null;

create function threadline.track_schedule_enabled () returns trigger
  language plpgsql
as $$
begin
  if new.schedule is null then
    new.schedule_enabled_at := null;
  elsif tg_op = 'INSERT'
     or new.schedule is distinct from old.schedule
     or new.timezone is distinct from old.timezone
     or (new.enabled and not old.enabled) then
    new.schedule_enabled_at := absurd.current_time();
  end if;
  return new;
end;
$$;

create trigger workflows_schedule_enabled before insert or update on threadline.workflows
  for each row execute function threadline.track_schedule_enabled();

-- Workflows started by an event name.
create index workflows_on_event on threadline.workflows ((recipe ->> 'on_event'))
  where recipe ? 'on_event';

-- A slot row marks a (workflow, slot) handled: with a run when it fired, without one when
-- catch_up skipped it. The row and the spawn commit together.
alter table threadline.schedule_ticks
  add column fired_at timestamptz not null default now(),
  add column skipped integer not null default 0;  -- earlier missed slots this row accounts for

-- Concurrency: a run counts against its workflow's max_concurrent_runs from admission until it
-- finishes. Runs of workflows without a limit are admitted when spawned (the default).
-- A queued run's place in line is its queue_seq, drawn under the workflow's admission lock (held
-- to commit), so the line is in commit order: a spawn that waited for the lock cannot jump runs
-- queued meanwhile, as ordering by created_at (its transaction's start) would let it.
alter table threadline.run_threads add column admitted_at timestamptz default now(),
  add column queue_seq bigint;
create sequence threadline.run_queue_seq;
create index run_threads_queued on threadline.run_threads (workflow, queue_seq)
  where state = 'queued';

-- The per-workflow admission lock: every writer that admits, queues or resumes a run of a
-- workflow with a limit takes it first (released at commit).
create function threadline.lock_admission (p_workflow text) returns void
  language sql
as $$
  select pg_advisory_xact_lock(7412, hashtext(p_workflow));
$$;

-- Put a new run in line: the lock first, then its place, so places are drawn in commit order.
create function threadline.queue_run (p_run_id uuid, p_workflow text) returns void
  language plpgsql
as $$
begin
  perform threadline.lock_admission(p_workflow);
  update threadline.run_threads
     set state = 'queued', admitted_at = null, queue_seq = nextval('threadline.run_queue_seq')
   where run_id = p_run_id;
end;
$$;

-- Runs of a workflow holding a place: admitted and not finished.
create function threadline.active_runs (p_workflow text) returns integer
  language sql stable
as $$
  select count(*)::integer from threadline.run_threads
   where workflow = p_workflow and admitted_at is not null
     and state not in ('completed', 'failed', 'cancelled');
$$;

-- Admit the first queued runs of a workflow in line while it has room: each admitted run leaves
-- `queued`, gets its admission event (its handler awaits it, holding no process) and a thread
-- note if it had to wait. Serialised per workflow by the admission lock, so concurrent spawns and
-- finishers never admit past the limit. Returns how many were admitted.
create function threadline.admit_queued (p_queue text, p_workflow text)
  returns integer
  language plpgsql
as $$
declare
  v_max integer;
  v_active integer;
  v_run record;
  v_admitted integer := 0;
begin
  perform threadline.lock_admission(p_workflow);
  if not exists (select 1 from threadline.run_threads where workflow = p_workflow and state = 'queued') then
    return 0;  -- the common case (checked under the lock: a queued run committed before it is seen)
  end if;
  select (recipe ->> 'max_concurrent_runs')::integer into v_max
    from threadline.workflows where slug = p_workflow;
  v_active := threadline.active_runs(p_workflow);
  for v_run in
    select run_id from threadline.run_threads
     where workflow = p_workflow and state = 'queued'
     order by queue_seq
     limit case when v_max is null then null else greatest(v_max - v_active, 0) end
     for update
  loop
    update threadline.run_threads
       set state = 'pending', admitted_at = absurd.current_time(), updated_at = now()
     where run_id = v_run.run_id and state = 'queued';
    continue when not found;  -- cancelled while we waited for its row
    perform absurd.emit_event(p_queue, 'threadline.run.admit:' || v_run.run_id,
                              jsonb_build_object('at', absurd.current_time()));
    if exists (select 1 from threadline.thread_entries
                where run_id = v_run.run_id and dedupe_key = 'queued') then
      perform threadline.append_entry(v_run.run_id, 'system', 'threadline', 'note', null, 'admitted',
        'Starting: a place is free (max_concurrent_runs '
          || coalesce(v_max::text, 'no longer set') || ').', null);
    end if;
    perform pg_notify('threadline', 'admitted:' || v_run.run_id);
    v_admitted := v_admitted + 1;
  end loop;
  return v_admitted;
end;
$$;

-- A run that leaves an admitted state for a finished one frees its place in the same transaction,
-- whichever code finished it (the conductor, `threadline cancel`, anything later).
create function threadline.run_finished_admit () returns trigger
  language plpgsql
as $$
begin
  perform threadline.admit_queued(tg_argv[0], new.workflow);
  return null;
end;
$$;

create trigger run_threads_finished_admit after update of state on threadline.run_threads
  for each row
  when (new.state in ('completed', 'failed', 'cancelled')
        and old.state not in ('completed', 'failed', 'cancelled', 'queued')
        and new.admitted_at is not null)
  execute function threadline.run_finished_admit('threadline');
