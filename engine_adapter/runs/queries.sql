-- The named queries of engine_adapter.runs: a block is `-- name --`, a comment line, then
-- the query (store/db.py loads every part's queries.sql; a name is unique across them).

-- Concurrency caps (migration 021): global, per initiator, and a workflow's max_concurrent_runs.

-- Retention (migration 023): which finished runs and outputs are past their time, and removing them.

-- retake_run_agent --
-- A retried run's bot settings, taken again as they are now (migration 040): what the run kept
-- before and what it keeps from now on (commands.retry_run says in the thread what changed).
-- Through the checked door of migration 047 (a retry's only).
select * from threadline.retake_run_agent(%(run_id)s)

-- list_limits --
-- Every cap with the top-level runs holding a place under it and those waiting for one.
select l.kind, l.name, l.max_runs, l.set_by, l.set_at,
       threadline.active_top_runs(nullif(l.name, '')) as active,
       (select count(*) from threadline.run_threads q
         where q.state = 'queued' and (l.kind = 'global' or q.initiator = l.name)) as queued
  from threadline.run_limits l
 order by l.kind desc, l.name

-- set_limit --
insert into threadline.run_limits (kind, name, max_runs, set_by)
values (%(kind)s, %(name)s, %(max_runs)s, %(set_by)s)
on conflict (kind, name) do update
   set max_runs = excluded.max_runs, set_by = excluded.set_by, set_at = now()

-- remove_limit --
delete from threadline.run_limits where kind = %(kind)s and name = %(name)s
returning kind

-- run_caps --
-- Every cap that applies to a run, with the runs holding a place under each (the run itself not
-- counted unless it holds one), and the queued runs ahead of it in line.
select r.state, r.workflow, r.initiator,
       (w.recipe ->> 'max_concurrent_runs')::integer as workflow_max,
       threadline.active_runs(r.workflow) as workflow_active,
       (select max_runs from threadline.run_limits
         where kind = 'initiator' and name = r.initiator) as initiator_max,
       threadline.active_top_runs(r.initiator) as initiator_active,
       (select max_runs from threadline.run_limits where kind = 'global') as global_max,
       threadline.active_top_runs(null) as global_active,
       (select count(*) from threadline.run_threads q
         where q.state = 'queued' and q.queue_seq < r.queue_seq
           and (exists (select 1 from threadline.run_limits) or q.workflow = r.workflow))
         as ahead
  from threadline.run_threads r
  join threadline.workflows w on w.slug = r.workflow
 where r.run_id = %(run_id)s

-- enqueue_notification --
-- One notification in the outbox, once per event, rule and target (migration 044: one whose links
-- decide as an account only to a channel it registered).
select threadline.enqueue_notification(%(run_id)s, %(event)s, %(event_key)s, %(rule)s,
                                       %(channel)s, %(target)s, %(subject)s, %(text)s)

-- gates_waiting --
-- Open gates of runs whose recipe asks to hear of a gate waiting: with the question's age.
select rt.run_id, rt.await_key, rt.recipe -> 'notify' as notify, q.text,
       extract(epoch from now() - q.created_at) as waited_s
  from threadline.run_threads rt
  join threadline.thread_entries q
    on q.run_id = rt.run_id and q.dedupe_key = 'question:' || rt.await_key
 where rt.awaiting and rt.await_kind = 'gate' and rt.state = 'waiting'
   and jsonb_path_exists(rt.recipe, '$.notify[*].when[*] ? (@ == "waiting")')

-- append_entry --
-- One thread entry under the run's row lock; null when the dedupe key was used already.
select threadline.append_entry(%(run_id)s, %(author_kind)s, %(author)s, %(kind)s,
                               %(step_key)s, %(dedupe_key)s, %(text)s, %(data)s) as seq

-- lock_run --
-- The run row, locked for the rest of the transaction (migration 032 checks the caller).
select * from threadline.lock_run(%(run_id)s)

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

-- set_run_state --
-- Where a run stands, through the checked transition (migration 047); null for a cancelled run.
select threadline.set_run_state(%(run_id)s, %(state)s, %(step)s, %(try)s, %(await_key)s,
                                %(await_kind)s, %(wake_at)s) as run_id

-- db_now --
-- The database clock: every wake-up time and deadline comes from it.
select absurd.current_time() as now

-- spawn_run --
-- A new run, through the one checked door (migration 032); with an idempotency key already used,
-- that key's run and created = false.
select run_id, created, state
  from threadline.spawn_run(%(queue)s, %(task)s, %(handler_v)s::integer, %(options)s,
                            %(workflow)s, %(version)s::integer, %(hash)s, %(payload)s, %(trigger)s,
                            %(idempotency_key)s, %(initiator)s, %(opening)s, %(child)s,
                            %(snapshot)s, %(carried)s)

-- open_children --
-- A run's children that have not finished, to cancel with it.
select run_id from threadline.run_threads
 where parent_run_id = %(run_id)s and state not in ('completed', 'failed', 'cancelled')

-- deliver_event --
-- Keep an outside event and end the waits for it (migration 010); the step keys released.
select threadline.deliver_event(%(queue)s, %(name)s, %(key)s, %(event_id)s, %(payload)s,
                                %(source)s) as released

-- cancel_engine_task --
-- Absurd's cancel: the task and its open runs end cancelled (through migration 045's door).
select threadline.cancel_run_task(%(queue)s, %(run_id)s)

-- retry_engine_task --
-- Absurd's in-place retry of a task that failed in the engine itself (migration 045's door).
select threadline.retry_run_task(%(queue)s, %(run_id)s)

-- pause_state --
-- The global pause switch: a row while new runs are refused.
select reason, paused_by, via, paused_at from threadline.pause

-- set_pause --
insert into threadline.pause (reason, paused_by, via) values (%(reason)s, %(actor)s, %(via)s)
on conflict (only_row) do update set reason = excluded.reason, paused_by = excluded.paused_by,
  via = excluded.via, paused_at = now()

-- clear_pause --
delete from threadline.pause returning paused_at

-- insert_resume_token --
-- A new resume token's hash, bound to a run's open gate and the subject it decides as (migration
-- 044: the conductor's only for the subject of a notification queued for that gate).
select threadline.issue_resume_token(%(token_hash)s, %(run_id)s, %(gate_key)s, %(subject)s,
                                     %(via)s, %(ttl_s)s) as expires_at

-- use_resume_token --
-- A presented token, hashed, locked, checked and (unless refused) marked used by this transaction
-- (migration 032): its run, gate and subject, and why it was refused.
select refusal, run_id, gate_key, subject, expires_at, used_at
  from threadline.use_resume_token(%(token)s, %(run_id)s::uuid)

-- insert_decision_audit --
-- One decision attempt, decided or refused, through threadline.audit_decision (migration 032).
select threadline.audit_decision(jsonb_build_object(
  'run_id', %(run_id)s::uuid, 'gate_key', %(gate_key)s::text, 'actor', %(actor)s::text,
  'via', %(via)s::text, 'decision', %(decision)s::text, 'reason', %(reason)s::text,
  'outcome', %(outcome)s::text, 'why', %(why)s::text, 'account_id', %(account_id)s::bigint,
  'minted_by', %(minted_by)s::text))

-- decision_audit_of_run --
select run_id, gate_key, actor, via, decision, reason, outcome, why, minted_by, created_at
  from threadline.decision_audit where run_id = %(run_id)s order by id

-- runs_past_retention --
-- Finished top-level runs older than their workflow's retention.runs (%(runs)s: slug -> seconds,
-- each workflow's as retention.py reads it), oldest first.
select r.run_id
  from threadline.run_threads r
 where r.parent_run_id is null and r.state in ('completed', 'failed', 'cancelled')
   and r.finished_at < now() - make_interval(secs => (%(runs)s::jsonb ->> r.workflow)::float8)
 order by r.finished_at
 limit %(limit)s

-- outputs_past_retention --
-- Finished runs with streamed command output older than their workflow's retention.output
-- (%(output)s: slug -> seconds).
select r.run_id
  from threadline.run_threads r
 where r.state in ('completed', 'failed', 'cancelled')
   and r.finished_at < now() - make_interval(secs => (%(output)s::jsonb ->> r.workflow)::float8)
   and exists (select 1 from threadline.thread_entries e
                where e.run_id = r.run_id and e.author_kind = 'bot' and e.kind = 'progress')
 order by r.finished_at
 limit %(limit)s

-- delete_runs --
select threadline.delete_runs(%(run_ids)s::uuid[]) as removed

-- delete_outputs --
select threadline.delete_outputs(%(run_ids)s::uuid[]) as removed

-- cleanup_engine_events --
-- The engine's emitted events older than the default run retention (migration 023).
select threadline.cleanup_engine_events(%(limit)s) as removed

-- prune_dead_workers --
-- Forget processes dead for a day, counting them (migration 023).
select threadline.prune_dead_workers() as removed

-- prune_schedule_ticks --
-- Schedule slots past their workflow's run retention, each workflow's latest kept (migration 028).
select threadline.prune_schedule_ticks(%(runs)s, %(limit)s) as removed

-- try_cleanup_lock --
-- One cleanup at a time across conductors (a session lock, released by unlock_cleanup).
select pg_try_advisory_lock(7414, 0) as locked

-- unlock_cleanup --
select pg_advisory_unlock(7414, 0) as unlocked

-- start_cleanup --
select threadline.start_cleanup(%(by)s) as id

-- finish_cleanup --
select threadline.finish_cleanup(%(id)s, %(runs)s, %(outputs)s, %(events)s, %(workers)s,
                                 %(ticks)s, %(error)s)

-- last_cleanup --
select id, started_at, finished_at, by_worker, runs_removed, outputs_removed, events_removed,
       workers_removed, ticks_removed, error
  from threadline.cleanups order by id desc limit 1

-- workflow_retentions --
-- Each workflow's own retention setting, if any (retention.py fills in the defaults).
select slug, recipe -> 'retention' as retention from threadline.workflows

-- retention_defaults --
select runs_s, output_s, set_by, set_at from threadline.retention_defaults

-- set_retention_defaults --
update threadline.retention_defaults
   set runs_s = %(runs_s)s, output_s = %(output_s)s, set_by = %(set_by)s, set_at = now()

-- fold_run_counts --
-- The kept run counts of past days folded into one row each (migration 026).
select threadline.fold_run_counts() as removed

-- run_ids_matching --
-- The runs whose ids start with the hex digits given (the primary key's range from them padded
-- with 0s to them padded with fs) or end with them (the short id the console shows is the id's
-- tail: its reversed text starts with the reversed tail, index of migration 038), at most n.
select run_id from threadline.run_threads
 where run_id between %(low)s::uuid and %(high)s::uuid
union
select run_id from threadline.run_threads
 where reverse(run_id::text) like %(reversed_tail)s || '%%'
 order by run_id
 limit %(n)s

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

-- workflows_with_queued_runs --
-- Workflows that have runs waiting for admission (the reconcile sweep re-admits them).
select distinct workflow from threadline.run_threads where state = 'queued'
