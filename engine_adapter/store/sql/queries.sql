-- append_entry --
-- One thread entry under the run's row lock; null when the dedupe key was used already.
select threadline.append_entry(%(run_id)s, %(author_kind)s, %(author)s, %(kind)s,
                               %(step_key)s, %(dedupe_key)s, %(text)s, %(data)s) as seq

-- lock_run --
-- The run row, locked for the rest of the transaction (migration 032 checks the caller).
select * from threadline.lock_run(%(run_id)s)

-- get_run --
-- The run row without a lock.
select * from threadline.run_threads where run_id = %(run_id)s

-- emit_step_done --
-- The step's done event, `awaiting` cleared and a wake-up, if the caller may release it (008).
select threadline.emit_step_done(%(queue)s, %(run_id)s, %(step_key)s, %(payload)s)

-- emit_retry --
-- A failed run's retry event, human doors only (migration 008).
select threadline.emit_retry(%(queue)s, %(run_id)s, %(step_key)s, %(payload)s)

-- emit_debug_event --
-- An event emitted by hand, never one of Threadline's own (migration 008).
select threadline.emit_debug_event(%(queue)s, %(event)s, %(payload)s)

-- insert_decision --
-- A gate decision, recorded by threadline.record_decision (migration 032), which checks who may;
-- the step key is unique, so a gate is decided once (no row: decided already).
select d.created_at
  from threadline.record_decision(jsonb_build_object(
         'step_key', %(step_key)s::text, 'run_id', %(run_id)s::uuid,
         'decision', %(decision)s::text, 'actor', %(actor)s::text, 'via', %(via)s::text,
         'on_behalf_of', %(on_behalf_of)s::text, 'reason', %(reason)s::text,
         'account_id', %(account_id)s::bigint, 'minted_by', %(minted_by)s::text)) d (created_at)
 where d.created_at is not null

-- get_decision --
-- The decision taken for one gate, if any.
select * from threadline.decisions where step_key = %(step_key)s

-- set_run_state --
-- Where a run stands, through the checked transition (migration 047); null for a cancelled run.
select threadline.set_run_state(%(run_id)s, %(state)s, %(step)s, %(try)s, %(await_key)s,
                                %(await_kind)s, %(wake_at)s) as run_id

-- db_now --
-- The database clock: every wake-up time and deadline comes from it.
select absurd.current_time() as now

-- get_workflow --
-- One workflow by slug.
select * from threadline.workflows where slug = %(slug)s

-- list_workflows --
-- Every workflow, with its run count: the runs its runs page lists (branches are in their parent),
-- from the counts kept with them (migrations 026, 037).
select w.slug, w.name, w.description, w.bot, w.schedule, w.timezone, w.enabled, w.version, w.hash,
       w.updated_at, (select coalesce(sum(c.runs), 0)::int from threadline.run_counts c
                       where c.workflow = w.slug) as runs
  from threadline.workflows w
 order by w.slug

-- lock_workflow --
-- One workflow, locked while a new version is written (migration 047 checks the caller).
select * from threadline.lock_workflow(%(slug)s)

-- store_workflow_version --
-- A new version: the workflow's row (made at version 1, or moved on) and its immutable snapshot,
-- written together by the checked door (migration 047); the version's number.
select threadline.store_workflow_version(%(row)s) as version

-- list_workflow_versions --
-- A workflow's versions, newest first.
select slug, version, hash, source, rolled_back_from, created_at
  from threadline.workflow_versions
 where slug = %(slug)s order by version desc

-- versions_by_hash --
-- A workflow's versions whose canonical hash starts with a prefix.
select version, hash from threadline.workflow_versions
 where slug = %(slug)s and starts_with(hash, %(prefix)s)
 order by version

-- spawn_run --
-- A new run, through the one checked door (migration 032); with an idempotency key already used,
-- that key's run and created = false.
select run_id, created, state
  from threadline.spawn_run(%(queue)s, %(task)s, %(handler_v)s::integer, %(options)s,
                            %(workflow)s, %(version)s::integer, %(hash)s, %(payload)s, %(trigger)s,
                            %(idempotency_key)s, %(initiator)s, %(opening)s, %(child)s,
                            %(snapshot)s, %(carried)s)

-- set_run_outputs --
-- What a finishing run hands on (its parent's step reads it from the run.done event).
select threadline.set_run_outputs(%(run_id)s, %(outputs)s)

-- open_children --
-- A run's children that have not finished, to cancel with it.
select run_id from threadline.run_threads
 where parent_run_id = %(run_id)s and state not in ('completed', 'failed', 'cancelled')

-- deliver_event --
-- Keep an outside event and end the waits for it (migration 010); the step keys released.
select threadline.deliver_event(%(queue)s, %(name)s, %(key)s, %(event_id)s, %(payload)s,
                                %(source)s) as released

-- register_wait --
-- A wait_for_event step starts waiting; true when an event already there ended it (010).
select threadline.register_wait(%(queue)s, %(run_id)s, %(step_key)s, %(names)s, %(key)s)
  as released

-- event_wait --
-- What a waiting step waits for (migration 010).
select names, key from threadline.event_waits where step_key = %(step_key)s

-- release_wait --
-- End a wait once (a timeout); false when an event ended it first (migration 010).
select threadline.release_wait(%(queue)s, %(step_key)s, %(payload)s) as released

-- register_worker --
-- A new conductor or bot process, of the caller's kind; takes on this connection the advisory
-- lock its lock key names, held while the process lives (migration 043).
select threadline.register_worker(%(id)s, %(kind)s, %(host)s, %(pid)s, %(version)s,
                                  %(sandbox)s) as lock_key

-- heartbeat_worker --
-- The process is still beating (only the connection holding its lock may say so).
select threadline.beat_worker(%(id)s, false)

-- stop_worker --
-- A process stopping cleanly: health reads it as stopped, not dead (migration 040).
select threadline.beat_worker(%(id)s, true)

-- list_workers --
-- Every known process, newest first, with liveness from its advisory lock.
select w.id, w.kind, w.host, w.pid, w.started_at, w.last_beat_at, w.version, w.sandbox,
       w.stopped_at, extract(epoch from (now() - w.last_beat_at))::float8 as last_beat_age_s,
       exists (select 1 from threadline.live_workers l where l.id = w.id) as alive
  from threadline.workers w
 order by w.started_at desc
 limit 200

-- live_worker_by_pid --
-- Whether the process with this pid (on this host) holds its liveness lock, i.e. finished starting.
select exists (select 1 from threadline.live_workers
                where kind = %(kind)s and pid = %(pid)s and host = %(host)s) as alive

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

-- cancel_engine_task --
-- Absurd's cancel: the task and its open runs end cancelled (through migration 045's door).
select threadline.cancel_run_task(%(queue)s, %(run_id)s)

-- claim_step --
-- The next instruction a bot may claim, claimed, in one call (migration 025).
select threadline.claim_step(%(bots)s::text[], %(worker_id)s, %(host)s, %(lease_s)s) as claim

-- report_step --
-- An attempt's end in one call, fenced by its attempt and its secret (migrations 025, 043).
select threadline.report_step(%(queue)s, %(run_id)s, %(step_key)s, %(attempt)s, %(secret)s,
                              %(bot)s, %(outcome)s, %(backoff_s)s, %(note)s, %(message)s,
                              %(terminal_kind)s, %(terminal_text)s, %(payload)s,
                              %(exit_code)s) as result

-- send_entry --
-- The conductor's SEND in one call (migration 025): the entry, the run armed, the wake-up.
select threadline.send_entry(%(run_id)s, %(kind)s, %(text)s, %(step_key)s, %(data)s, %(state)s,
                             %(step)s, %(try)s, %(await_kind)s, %(channel)s, %(wake)s) as seq

-- set_claim_pgid --
-- Where the attempt's process group runs, so a successor can make sure it is gone (migration 043:
-- the attempt's secret says it is this attempt's).
select threadline.set_claim_pgid(%(step_key)s, %(attempt)s, %(secret)s, %(pgid)s)

-- extend_claim --
-- Heartbeat of a running attempt; whether it is still current and the run still live.
select threadline.renew_claim(%(step_key)s, %(attempt)s, %(secret)s, %(lease_s)s, %(pgid)s)
  as live

-- cancel_claim --
-- An open attempt closed without a result: its run no longer awaits it.
select threadline.cancel_claim(%(step_key)s, %(attempt)s, %(secret)s)

-- engine_task --
-- Absurd's task row for a run.
select task_id, state, attempts, max_attempts, enqueue_at, first_started_at, cancelled_at, last_attempt_run
  from absurd.t_threadline where task_id = %(run_id)s

-- retry_engine_task --
-- Absurd's in-place retry of a task that failed in the engine itself (migration 045's door).
select threadline.retry_run_task(%(queue)s, %(run_id)s)

-- run_checkpoints --
-- The run's journal: Threadline's copy of its checkpoints (migration 022), which step results are
-- read back from; it outlives any cleanup of the engine's own tables.
select name as checkpoint_name, state, status, written_at as updated_at
  from threadline.run_journal where run_id = %(run_id)s order by written_at, name

-- engine_checkpoints --
-- The engine's own checkpoints of a run, with the attempt that wrote each (the debug pane's).
select checkpoint_name, state, status, owner_run_id, updated_at
  from absurd.c_threadline where task_id = %(run_id)s order by updated_at, checkpoint_name

-- run_claims --
-- Every bot attempt of the run.
select step_key, attempt, worker_id, host, started_at, finished_at, outcome, lease_until
  from threadline.step_claims where run_id = %(run_id)s order by started_at

-- run_entries --
-- A page of the run thread in order.
select seq, author_kind, author, kind, step_key, text, data, created_at
  from threadline.thread_entries
 where run_id = %(run_id)s and seq > %(after)s
 order by seq limit %(limit)s

-- health_counts --
-- Runnable engine runs nobody claimed, and instructions waiting for a bot.
select (select count(*) from absurd.r_threadline
         where state = 'pending' and available_at < absurd.current_time() - interval '5 seconds')
         as runnable_unclaimed,
       (select count(*) from threadline.run_threads
         where awaiting and await_kind = 'bot' and state = 'running')
         as instructions_waiting

-- secret_env_names --
-- Environment variables that hold a secret of Threadline's (a webhook's secret, an agent bot's
-- model key): never passed to a step, whatever a recipe's `env` says.
select distinct substr(secret, 5) as name from threadline.webhook_triggers
 where secret like 'env:%%'
union
select api_key_env from threadline.bots where api_key_env is not null

-- secret_clashes --
-- Another workflow's webhook secret that this recipe's env names, or this recipe's webhook secret
-- that another workflow's env names: a step would be handed a secret.
select t.workflow as other, substr(t.secret, 5) as name, 'secret' as held_as
  from threadline.webhook_triggers t
 where t.workflow <> %(slug)s and t.secret like 'env:%%' and substr(t.secret, 5) = any(%(env)s::text[])
union all
select w.slug, e.name, 'env'
  from threadline.workflows w,
       jsonb_array_elements_text(coalesce(w.recipe -> 'env', '[]'::jsonb)) as e(name)
 where w.slug <> %(slug)s and e.name = any(%(secrets)s::text[])

-- pause_state --
-- The global pause switch: a row while new runs are refused.
select reason, paused_by, via, paused_at from threadline.pause

-- set_pause --
insert into threadline.pause (reason, paused_by, via) values (%(reason)s, %(actor)s, %(via)s)
on conflict (only_row) do update set reason = excluded.reason, paused_by = excluded.paused_by,
  via = excluded.via, paused_at = now()

-- clear_pause --
delete from threadline.pause returning paused_at

-- runs_with_timeout --
-- Unfinished runs whose recipe sets a run timeout, with their age (the conductor's sweep).
select run_id, recipe ->> 'timeout' as timeout, extract(epoch from now() - created_at) as age_s
  from threadline.run_threads
 where state not in ('completed', 'failed', 'cancelled') and recipe ? 'timeout'
