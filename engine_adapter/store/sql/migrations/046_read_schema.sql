-- The read schema: stable, documented views of what Threadline has done, for people exploring
-- from Python (engine_adapter.explore), for Grafana or Metabase, and for the console's metrics.
--
--   * The views live in a schema of their own, threadline_read, apart from the tables they read:
--     the tables may change with any migration, the views keep their columns (a new column may be
--     added; a column is renamed or removed only with a new read_schema_version()). A tool is
--     pointed at one schema (search_path=threadline_read) and sees only the contract.
--   * Every view and every column carries a comment (COMMENT ON): the docs are in the database,
--     where \d+, Grafana and Metabase show them, and a test fails on a column without one.
--   * The viewer's and the console's logins read them; no login writes through them (the views
--     join and aggregate, so Postgres refuses writes, and no role holds more than SELECT).
--   * Durations are in seconds (double precision); an unfinished step, attempt or gate wait
--     counts until now.

create schema threadline_read;
comment on schema threadline_read is
  'Threadline''s read schema: documented views of runs, steps, attempts, thread entries, gate '
  'waits, agent turns and processes. Its version: threadline_read.read_schema_version().';

create function threadline_read.read_schema_version () returns integer
  language sql immutable
  set search_path = pg_catalog, pg_temp
as $$ select 1 $$;
comment on function threadline_read.read_schema_version () is
  'The read schema''s version: raised when a view''s column is renamed or removed (not when one '
  'is added).';

-- A step key is "<run id>:<step path>:<try>" (names.step_key); an agent step's later rounds and
-- its questions are keyed like steps, their paths marked "~r2", "~ask1" (names.ROUND_MARK).
create function threadline_read.step_of (p_step_key text) returns text
  language sql immutable
  set search_path = pg_catalog, pg_temp
as $$ select split_part(split_part(p_step_key, ':', 2), '~', 1) $$;
comment on function threadline_read.step_of (text) is
  'The step path of a step key "<run id>:<step path>:<try>", without an agent round''s mark.';

create function threadline_read.try_of (p_step_key text) returns integer
  language sql immutable
  set search_path = pg_catalog, pg_temp
as $$ select nullif(substring(split_part(p_step_key, ':', 3) from '^[0-9]+$'), '')::integer $$;
comment on function threadline_read.try_of (text) is
  'The try number of a step key "<run id>:<step path>:<try>" (1 = first try).';

create view threadline_read.runs as
select r.run_id, r.workflow, r.workflow_version, r.state,
       r.trigger ->> 'kind' as trigger_kind, r.initiator, r.bot, r.parent_run_id,
       r.current_step,
       case when r.state = 'failed' then r.current_step end as failed_step,
       r.awaiting, r.await_kind,
       r.created_at, r.admitted_at, r.finished_at,
       extract(epoch from coalesce(r.finished_at, now()) - r.created_at)::float8 as duration_s
  from threadline.run_threads r;
comment on view threadline_read.runs is 'One row per run (child runs included: parent_run_id).';
comment on column threadline_read.runs.run_id is 'The run''s id.';
comment on column threadline_read.runs.workflow is 'The workflow (its slug) the run runs.';
comment on column threadline_read.runs.workflow_version is 'The workflow version it snapshotted.';
comment on column threadline_read.runs.state is
  'pending, queued, running, sleeping, waiting, completed, failed or cancelled.';
comment on column threadline_read.runs.trigger_kind is
  'What started it: manual, schedule, webhook, event, sub-workflow, branch, ...';
comment on column threadline_read.runs.initiator is 'Who started it (a person''s name), if one did.';
comment on column threadline_read.runs.bot is 'The bot its steps go to.';
comment on column threadline_read.runs.parent_run_id is 'The run that started it as a child.';
comment on column threadline_read.runs.current_step is 'The step it is at, or ended at.';
comment on column threadline_read.runs.failed_step is 'The step it failed at (failed runs only).';
comment on column threadline_read.runs.awaiting is 'Whether it waits (for a bot, a person or an event).';
comment on column threadline_read.runs.await_kind is 'What it waits for: bot, gate or event.';
comment on column threadline_read.runs.created_at is 'When it was started.';
comment on column threadline_read.runs.admitted_at is 'When it left the queue (null while queued).';
comment on column threadline_read.runs.finished_at is 'When it ended (null while in flight).';
comment on column threadline_read.runs.duration_s is 'Seconds from start to end (to now while in flight).';

create view threadline_read.steps as
select i.run_id, r.workflow, threadline_read.step_of(i.step_key) as step,
       threadline_read.try_of(i.step_key) as try, i.step_key,
       case when i.kind = 'question' then 'gate' else 'bot' end as kind,
       i.created_at as started_at,
       coalesce(t.created_at, d.created_at) as finished_at,
       case
         when t.kind is not null then substring(t.kind from 'signal\.dispatch\.(.*)')
         when d.decision is not null then d.decision
         when r.await_key = i.step_key and r.awaiting then 'open'
         else 'ended'
       end as outcome,
       extract(epoch from coalesce(t.created_at, d.created_at,
                                   case when r.await_key = i.step_key and r.awaiting then now() end)
                          - i.created_at)::float8 as duration_s,
       (t.data ->> 'exit_code')::integer as exit_code,
       case when t.kind = 'signal.dispatch.failed' then left(t.text, 2000) end as error,
       (select count(*) from threadline.step_claims c where c.step_key = i.step_key)::integer
         as attempts
  from threadline.thread_entries i
  join threadline.run_threads r on r.run_id = i.run_id
  left join lateral (
    select e.kind, e.text, e.data, e.created_at from threadline.thread_entries e
     where e.run_id = i.run_id and e.step_key = i.step_key and e.kind like 'signal.dispatch.%'
     order by e.seq limit 1) t on true
  left join threadline.decisions d on d.step_key = i.step_key
 where i.kind in ('instruction', 'question') and i.step_key is not null;
comment on view threadline_read.steps is
  'One row per try of a step that went to a bot (an instruction) or to people (a gate''s '
  'question); an agent step''s later rounds and questions are rows of their own (their keys '
  'marked ~r2, ~ask1).';
comment on column threadline_read.steps.run_id is 'The run.';
comment on column threadline_read.steps.workflow is 'The run''s workflow.';
comment on column threadline_read.steps.step is
  'The step''s path: its id, inside a group, loop or parallel branch the ids joined by "/" '
  '(each[2]/deploy).';
comment on column threadline_read.steps.try is 'The try (1 = first; a retry of the run adds one).';
comment on column threadline_read.steps.step_key is
  'The try''s key: "<run id>:<step path>:<try>" (the path marked ~r2, ~ask1 for an agent''s rounds).';
comment on column threadline_read.steps.kind is 'bot (an instruction a bot runs) or gate (a question to people).';
comment on column threadline_read.steps.started_at is 'When the instruction or question was sent.';
comment on column threadline_read.steps.finished_at is 'When it ended: its result, or its gate''s decision.';
comment on column threadline_read.steps.outcome is
  'completed or failed (a bot''s step), approve, deny, reply or timeout (a gate), open (still '
  'waited for) or ended (the run moved on without a result: cancelled, lost).';
comment on column threadline_read.steps.duration_s is
  'Seconds from sent to ended (to now while open; null when it ended without a result).';
comment on column threadline_read.steps.exit_code is 'The command''s exit status, where it ran one.';
comment on column threadline_read.steps.error is 'Why it failed (the failure''s text, cut at 2000 characters).';
comment on column threadline_read.steps.attempts is 'How many attempts bot processes made at it.';

create view threadline_read.attempts as
select c.run_id, r.workflow, threadline_read.step_of(c.step_key) as step,
       threadline_read.try_of(c.step_key) as try, c.step_key, c.attempt, c.worker_id, c.host,
       c.started_at, c.finished_at,
       coalesce(c.outcome, case when c.lease_until < now() then 'lost' else 'running' end)
         as outcome,
       extract(epoch from coalesce(c.finished_at, now()) - c.started_at)::float8 as duration_s,
       c.retry_at,
       (t.data ->> 'exit_code')::integer as exit_code,
       case when t.kind = 'signal.dispatch.failed' then left(t.text, 2000) end as error
  from threadline.step_claims c
  join threadline.run_threads r on r.run_id = c.run_id
  left join lateral (
    select e.kind, e.text, e.data from threadline.thread_entries e
     where e.run_id = c.run_id and e.step_key = c.step_key and e.kind like 'signal.dispatch.%'
       and (e.data ->> 'attempt')::integer = c.attempt
     order by e.seq limit 1) t on true;
comment on view threadline_read.attempts is
  'One row per attempt a bot process made at a step''s try (a claim of its instruction).';
comment on column threadline_read.attempts.run_id is 'The run.';
comment on column threadline_read.attempts.workflow is 'The run''s workflow.';
comment on column threadline_read.attempts.step is 'The step''s path.';
comment on column threadline_read.attempts.try is 'The step''s try.';
comment on column threadline_read.attempts.step_key is 'The try''s key: "<run id>:<step>:<try>".';
comment on column threadline_read.attempts.attempt is 'The attempt''s number within the try (1 = first).';
comment on column threadline_read.attempts.worker_id is 'The bot process that made it.';
comment on column threadline_read.attempts.host is 'The host it ran on.';
comment on column threadline_read.attempts.started_at is 'When it was claimed.';
comment on column threadline_read.attempts.finished_at is 'When it ended (null while running).';
comment on column threadline_read.attempts.outcome is
  'completed, failed, cancelled, lost (its process vanished) or running.';
comment on column threadline_read.attempts.duration_s is 'Seconds from claim to end (to now while running).';
comment on column threadline_read.attempts.retry_at is 'When a failed attempt is retried, if it is.';
comment on column threadline_read.attempts.exit_code is 'The command''s exit status, where it reported one.';
comment on column threadline_read.attempts.error is 'Why it failed (cut at 2000 characters).';

create view threadline_read.thread as
select e.run_id, e.seq, e.author_kind, e.author, e.kind, e.step_key, e.text, e.data, e.created_at
  from threadline.thread_entries e;
comment on view threadline_read.thread is 'Every entry of every run''s thread.';
comment on column threadline_read.thread.run_id is 'The run.';
comment on column threadline_read.thread.seq is 'The entry''s place in its thread (1, 2, ...).';
comment on column threadline_read.thread.author_kind is 'system, bot or human.';
comment on column threadline_read.thread.author is 'Who wrote it.';
comment on column threadline_read.thread.kind is
  'message, instruction, question, progress, signal.dispatch.completed/failed, decision, note, '
  'agent.assistant or agent.tool.';
comment on column threadline_read.thread.step_key is 'The step try it belongs to, if one.';
comment on column threadline_read.thread.text is 'Its text.';
comment on column threadline_read.thread.data is 'Its structured part (JSON).';
comment on column threadline_read.thread.created_at is 'When it was written.';

create view threadline_read.gate_waits as
select q.run_id, r.workflow, threadline_read.step_of(q.step_key) as step, q.step_key,
       q.created_at as asked_at, d.created_at as decided_at,
       extract(epoch from coalesce(d.created_at, now()) - q.created_at)::float8 as wait_s,
       d.decision, d.actor as decided_by, d.via, d.on_behalf_of,
       d.decision is null and r.awaiting and r.await_key = q.step_key as open
  from threadline.thread_entries q
  join threadline.run_threads r on r.run_id = q.run_id
  left join threadline.decisions d on d.step_key = q.step_key
 where q.kind = 'question' and q.step_key is not null;
comment on view threadline_read.gate_waits is 'One row per time a run asked people at a gate.';
comment on column threadline_read.gate_waits.run_id is 'The run.';
comment on column threadline_read.gate_waits.workflow is 'The run''s workflow.';
comment on column threadline_read.gate_waits.step is 'The gate''s step path.';
comment on column threadline_read.gate_waits.step_key is 'The gate try''s key.';
comment on column threadline_read.gate_waits.asked_at is 'When the question was asked.';
comment on column threadline_read.gate_waits.decided_at is 'When it was decided (null while open or when never decided).';
comment on column threadline_read.gate_waits.wait_s is 'Seconds it waited for a person (to now while undecided).';
comment on column threadline_read.gate_waits.decision is 'approve, deny, reply or timeout.';
comment on column threadline_read.gate_waits.decided_by is 'Who decided it.';
comment on column threadline_read.gate_waits.via is 'Through which door: cli, console, link, api, webhook or system.';
comment on column threadline_read.gate_waits.on_behalf_of is 'For whom, when someone decided for another person.';
comment on column threadline_read.gate_waits.open is 'Whether the run still waits at it.';

create view threadline_read.agent_turns as
select e.run_id, r.workflow, threadline_read.step_of(e.step_key) as step, e.step_key,
       (e.data ->> 'turn')::integer as turn, r.agent ->> 'model' as model,
       coalesce((e.data -> 'usage' ->> 'in')::bigint, 0) as tokens_in,
       coalesce((e.data -> 'usage' ->> 'out')::bigint, 0) as tokens_out,
       (e.data -> 'usage' ->> 'cost_usd')::float8 as cost_usd,
       e.created_at
  from threadline.thread_entries e
  join threadline.run_threads r on r.run_id = e.run_id
 where e.kind = 'agent.assistant';
comment on view threadline_read.agent_turns is
  'One row per model turn of an agent step (the assistant''s answer), with its tokens and cost.';
comment on column threadline_read.agent_turns.run_id is 'The run.';
comment on column threadline_read.agent_turns.workflow is 'The run''s workflow.';
comment on column threadline_read.agent_turns.step is 'The agent step''s path.';
comment on column threadline_read.agent_turns.step_key is 'The step try''s key.';
comment on column threadline_read.agent_turns.turn is 'The turn''s number within the step.';
comment on column threadline_read.agent_turns.model is 'The model the run''s bot was set to when it started.';
comment on column threadline_read.agent_turns.tokens_in is 'Prompt tokens the model reported.';
comment on column threadline_read.agent_turns.tokens_out is 'Completion tokens the model reported.';
comment on column threadline_read.agent_turns.cost_usd is
  'Cost in US dollars, at the model''s price when the turn ran (null: the model had no price).';
comment on column threadline_read.agent_turns.created_at is 'When the turn was written.';

create view threadline_read.workers as
select w.id, w.kind, w.host, w.pid, w.version, w.sandbox, w.started_at, w.last_beat_at,
       w.stopped_at, threadline.worker_alive(w.lock_key) as alive,
       extract(epoch from now() - w.last_beat_at)::float8 as beat_age_s
  from threadline.workers w;
comment on view threadline_read.workers is
  'One row per conductor or bot process that registered (stopped and vanished ones until pruned).';
comment on column threadline_read.workers.id is 'The process''s id.';
comment on column threadline_read.workers.kind is 'conductor or bots.';
comment on column threadline_read.workers.host is 'Its host.';
comment on column threadline_read.workers.pid is 'Its process id on that host.';
comment on column threadline_read.workers.version is 'The Threadline version it runs.';
comment on column threadline_read.workers.sandbox is 'The sandbox its steps run in (bot processes).';
comment on column threadline_read.workers.started_at is 'When it registered.';
comment on column threadline_read.workers.last_beat_at is 'Its last heartbeat.';
comment on column threadline_read.workers.stopped_at is 'When it stopped cleanly (null: running, or vanished).';
comment on column threadline_read.workers.alive is
  'Whether it is alive now (its database session still holds its liveness lock).';
comment on column threadline_read.workers.beat_age_s is 'Seconds since its last heartbeat.';

-- Functions are executable by PUBLIC by default: only the reading logins get these.
revoke all on function threadline_read.read_schema_version (), threadline_read.step_of (text),
  threadline_read.try_of (text) from public;
grant usage on schema threadline_read to threadline_viewer, threadline_console;
grant select on all tables in schema threadline_read to threadline_viewer, threadline_console;
grant execute on function threadline_read.read_schema_version (), threadline_read.step_of (text),
  threadline_read.try_of (text) to threadline_viewer, threadline_console;
