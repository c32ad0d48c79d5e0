-- frame_step_tries --
-- Each step try of a run: when it was sent, and when and how it ended (bot terminal, gate decision or wake time).
with tries as (
  select step_key,
         split_part(step_key, ':', 2) as step,
         split_part(step_key, ':', 3)::int as try,
         min(created_at) as sent_at,
         max(created_at) filter (where kind like 'signal.dispatch.%%') as terminal_at,
         max(kind) filter (where kind like 'signal.dispatch.%%') as terminal
    from threadline.thread_entries
   where run_id = %(run_id)s and step_key is not null
   group by step_key
)
select t.step_key, t.step, t.try, t.sent_at,
       coalesce(t.terminal_at, d.created_at,
                case when (s.state ->> 'wake_at')::timestamptz <= now()
                     then (s.state ->> 'wake_at')::timestamptz end) as ended_at,
       coalesce(replace(t.terminal, 'signal.dispatch.', ''), d.decision,
                case when (s.state ->> 'wake_at')::timestamptz <= now() then 'slept' end) as outcome
  from tries t
  left join threadline.decisions d on d.step_key = t.step_key
  left join absurd.c_threadline s
         on s.task_id = %(run_id)s and s.checkpoint_name = 'send:' || t.step || ':' || t.try
 order by t.sent_at, t.step_key

-- frame_workers --
-- Conductor and bot processes alive at some point during the run, with liveness from their lock.
select w.id, w.kind, w.pid, w.started_at, w.last_beat_at,
       exists (select 1 from threadline.live_workers l where l.id = w.id) as alive
  from threadline.workers w
  join threadline.run_threads r on r.run_id = %(run_id)s
 where w.started_at <= coalesce(r.finished_at, now())
   and (w.last_beat_at >= r.created_at - interval '5 seconds'
        or exists (select 1 from threadline.live_workers l where l.id = w.id))
 order by w.started_at

-- frame_done_events --
-- The run's step done events as the engine stored them (first write wins), oldest first.
select substr(event_name, length('threadline.step.done:') + 1) as step_key, emitted_at, payload
  from absurd.e_threadline
 where event_name like 'threadline.step.done:' || %(run_id)s || ':%%'
   and payload is not null
 order by emitted_at

-- frame_engine_runs --
-- The engine's runs of one task (one per conductor attempt): state, who holds the lease, when it wakes.
select run_id as engine_run, attempt, state, claimed_by, claim_expires_at, available_at, wake_event,
       started_at, completed_at, failed_at
  from absurd.r_threadline
 where task_id = %(run_id)s
 order by attempt


-- live_worker_by_pid --
-- Whether the process with this pid (on this host) holds its liveness lock, i.e. finished starting.
select exists (select 1 from threadline.live_workers
                where kind = %(kind)s and pid = %(pid)s and host = %(host)s) as alive
