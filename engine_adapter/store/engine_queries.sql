-- The only reads of Absurd's own tables (absurd.t_/r_/c_/e_/w_threadline, the engine's tasks,
-- runs, checkpoints, events and waits of Threadline's queue). Absurd offers functions for what
-- it does (claim, complete, await, emit, cancel, retry: Threadline calls those), but none for
-- looking: the console's debug pane, liveness (which runs a dead conductor held, which are due),
-- retention's counts and `health` read its tables here, and nowhere else
-- (tests/unit/test_layers.py holds it so). They are tied to the Absurd version the schema
-- pins (store/schema.py): an upgrade of Absurd checks these first.

-- Retention (migration 023): which finished runs and outputs are past their time, and removing them.

-- engine_attempts --
-- Absurd's runs (attempts) of one task; available_at is null while awaiting an event with no
-- timeout (the engine stores 'infinity', which Python's datetime cannot hold).
select run_id, attempt, state, claimed_by, claim_expires_at,
       nullif(available_at, 'infinity') as available_at, wake_event, started_at,
       completed_at, failed_at, failure_reason, created_at
  from absurd.r_threadline
 where task_id = %(run_id)s
 order by attempt

-- engine_waits --
-- What the task is awaiting now.
select step_name, event_name, timeout_at, created_at
  from absurd.w_threadline
 where task_id = %(run_id)s
 order by created_at

-- engine_events --
-- Events by name (a run's names are known from its step keys).
select event_name, payload, emitted_at
  from absurd.e_threadline
 where event_name = any(%(names)s::text[])
 order by emitted_at

-- engine_task_row --
-- Absurd's whole task row for a run, as JSON.
select to_jsonb(t) - 'params' as task from absurd.t_threadline t where task_id = %(run_id)s

-- workers_in_hand --
-- Each live worker with what it holds: engine runs for a conductor, open attempts for a bot host.
select w.id, w.kind, w.host, w.pid, w.started_at, w.last_beat_at, w.sandbox, w.stopped_at,
       extract(epoch from now() - w.last_beat_at)::float8 as last_beat_age_s,
       (w.id in (select id from threadline.live_workers)) as alive,
       case w.kind
         when 'conductor' then (select count(*) from absurd.r_threadline r
                                 where r.state = 'running' and r.claimed_by = w.id)
         else (select count(*) from threadline.step_claims c
                where c.worker_id = w.id and c.finished_at is null)
       end::int as in_hand
  from threadline.workers w
 order by w.kind, w.started_at desc
 limit 200

-- runnable_unclaimed --
-- Engine runs due but not taken by any conductor, oldest first.
select r.task_id as run_id, t.workflow, r.available_at,
       extract(epoch from absurd.current_time() - r.available_at)::float8 as waiting_s
  from absurd.r_threadline r
  left join threadline.run_threads t on t.run_id = r.task_id
 where r.state = 'pending' and r.available_at <= absurd.current_time()
 order by r.available_at
 limit %(limit)s

-- next_wake --
-- Seconds until the earliest run becomes claimable (null when none is scheduled), and how many
-- are claimable now.
select extract(epoch from (min(available_at) - absurd.current_time()))::float8 as seconds,
       count(*) filter (where available_at <= absurd.current_time()) as due
  from absurd.r_threadline
 where state in ('pending', 'sleeping') and available_at < 'infinity'

-- runs_held_by_dead_conductors --
-- Engine runs claimed by a conductor whose liveness lock is gone: fail them so they retry now.
select r.run_id, r.claimed_by
  from absurd.r_threadline r
 where r.state = 'running'
   and not exists (select 1 from threadline.live_workers l where l.id = r.claimed_by)
 limit 100

-- engine_task --
-- Absurd's task row for a run.
select task_id, state, attempts, max_attempts, enqueue_at, first_started_at, cancelled_at, last_attempt_run
  from absurd.t_threadline where task_id = %(run_id)s

-- engine_checkpoints --
-- The engine's own checkpoints of a run, with the attempt that wrote each (the debug pane's).
select checkpoint_name, state, status, owner_run_id, updated_at
  from absurd.c_threadline where task_id = %(run_id)s order by updated_at, checkpoint_name

-- health_counts --
-- Runnable engine runs nobody claimed, and instructions waiting for a bot.
select (select count(*) from absurd.r_threadline
         where state = 'pending' and available_at < absurd.current_time() - interval '5 seconds')
         as runnable_unclaimed,
       (select count(*) from threadline.run_threads
         where awaiting and await_kind = 'bot' and state = 'running')
         as instructions_waiting

-- count_past_retention --
-- What a cleanup would remove now (a dry run).
select (select count(*) from threadline.run_threads r
         where r.parent_run_id is null and r.state in ('completed', 'failed', 'cancelled')
           and r.finished_at < now()
                 - make_interval(secs => (%(runs)s::jsonb ->> r.workflow)::float8)) as runs,
       (select count(*) from threadline.thread_entries e
          join threadline.run_threads r on r.run_id = e.run_id
         where e.author_kind = 'bot' and e.kind = 'progress'
           and r.state in ('completed', 'failed', 'cancelled')
           and r.finished_at < now()
                 - make_interval(secs => (%(output)s::jsonb ->> r.workflow)::float8)) as outputs,
       (select count(*) from absurd.e_threadline
         where emitted_at < absurd.current_time()
                 - make_interval(secs => (select runs_s from threadline.retention_defaults)))
         as events,
       (select count(*) from threadline.workers w
         where w.last_beat_at < now() - interval '1 day'
           and not exists (select 1 from threadline.live_workers l where l.id = w.id)) as workers,
       (select count(*) from threadline.schedule_ticks_past_retention(%(runs)s)) as ticks
