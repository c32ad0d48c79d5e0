-- The named queries of engine_adapter.conductor: a block is `-- name --`, a comment line, then
-- the query (store/db.py loads every part's queries.sql; a name is unique across them).

-- claim_notifications --
-- Due notifications, leased to this notifier for a while (a notifier killed mid-send leaves its
-- lease to expire: the notification goes out again, with the same id).
select * from threadline.claim_notifications(%(lease_s)s, %(limit)s)

-- notification_sent --
-- A delivery made; nothing when the notification was no longer pending.
select id from threadline.notification_done(%(id)s, true, false, null, null)

-- notification_failed --
-- A failed delivery: tried again after a backoff, or given up.
select id from threadline.notification_done(%(id)s, false, %(give_up)s, %(backoff_s)s, %(error)s)

-- gate_still_open --
select exists (select 1 from threadline.run_threads
                where run_id = %(run_id)s and awaiting and await_kind = 'gate'
                  and await_key = %(gate_key)s) as open

-- set_run_outputs --
-- What a finishing run hands on (its parent's step reads it from the run.done event).
select threadline.set_run_outputs(%(run_id)s, %(outputs)s)

-- register_wait --
-- A wait_for_event step starts waiting; true when an event already there ended it (010).
select threadline.register_wait(%(queue)s, %(run_id)s, %(step_key)s, %(names)s, %(key)s)
  as released

-- release_wait --
-- End a wait once (a timeout); false when an event ended it first (migration 010).
select threadline.release_wait(%(queue)s, %(step_key)s, %(payload)s) as released

-- fail_engine_run --
-- Absurd's fail_run; the task is retried at once as a new conductor attempt.
select absurd.fail_run(%(queue)s, %(run_id)s, %(reason)s, absurd.current_time())

-- unreconciled_terminals --
-- Runs still awaiting a step whose terminal signal or decision is already in the thread.
-- A bot's terminal signal carries its done payload; a gate's is rebuilt from its decision row
-- (domain.decision_result).
select rt.run_id, rt.await_key, e.data as payload, null as decision, null as actor,
       null as reason, null::timestamptz as decided_at
  from threadline.run_threads rt
  join threadline.thread_entries e
    on e.run_id = rt.run_id and e.step_key = rt.await_key
   and e.kind in ('signal.dispatch.completed', 'signal.dispatch.failed')
 where rt.awaiting and rt.await_kind = 'bot' and rt.state = 'running'
union all
select rt.run_id, rt.await_key, null as payload, d.decision, d.actor, d.reason,
       d.created_at as decided_at
  from threadline.run_threads rt
  join threadline.decisions d on d.step_key = rt.await_key
 where rt.awaiting and rt.await_kind = 'gate' and rt.state = 'waiting'
 limit 100

-- send_entry --
-- The conductor's SEND in one call (migration 025): the entry, the run armed, the wake-up;
-- `queued` when the instruction waits behind another for its bot (migration 055).
select seq, queued
  from threadline.send_entry(%(run_id)s, %(kind)s, %(text)s, %(step_key)s, %(data)s, %(state)s,
                             %(step)s, %(try)s, %(await_kind)s, %(channel)s, %(wake)s)

-- runs_with_timeout --
-- Unfinished runs whose recipe sets a run timeout, with their age (the conductor's sweep).
select run_id, recipe ->> 'timeout' as timeout, extract(epoch from now() - created_at) as age_s
  from threadline.run_threads
 where state not in ('completed', 'failed', 'cancelled') and recipe ? 'timeout'

-- claim_runs_with_checkpoints --
-- Absurd's claim (the columns the SDK's claim_tasks reads) with each claimed run's committed
-- checkpoints, in one statement: the SDK would load them in a transaction of its own per run
-- (known_checkpoints.py).
select c.run_id, c.task_id, c.attempt, c.task_name, c.params, c.retry_strategy, c.max_attempts,
       c.headers, c.wake_event, c.event_payload,
       (select coalesce(jsonb_agg(jsonb_build_array(s.checkpoint_name, s.state)
                                  order by s.updated_at), '[]'::jsonb)
          from absurd.get_task_checkpoint_states(%(queue)s, c.task_id, c.run_id) s)
         as threadline_checkpoints  -- known_checkpoints.LOADED
  from absurd.claim_task(%(queue)s, %(worker_id)s, %(claim_timeout)s, %(batch_size)s) c

-- park_on_event --
-- Absurd's await_event, with no timeout, in the caller's transaction (known_checkpoints.park).
select should_suspend, payload
  from absurd.await_event(%(queue)s, %(task_id)s, %(run_id)s, %(checkpoint)s, %(event)s, null)

-- decisions_in_tree --
-- The decisions people made in a run and in the runs it started (branches, items,
-- sub-workflows, and theirs), oldest first; `from_step`: for one below, the run's step it
-- comes from.
select d.run_id, d.step_key, d.decision, d.actor, b.from_step
  from threadline.decisions d
  left join threadline.runs_below(%(run_id)s) b using (run_id)
 where d.decision <> 'timeout' and (b.run_id is not null or d.run_id = %(run_id)s)
 order by d.created_at
