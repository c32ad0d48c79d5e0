-- The named queries of engine_adapter.explore: a block is `-- name --`, a comment line, then
-- the query (store/db.py loads every part's queries.sql; a name is unique across them).

-- What engine_adapter.explore (connect() from Python) and the console's /metrics read: only the
-- views of the read schema (migration 046), never the tables under them. A filter left null
-- filters nothing; since/until bound the row's start (inclusive) and end (exclusive).

-- explore_runs --
select * from threadline_read.runs
 where (%(workflow)s::text is null or workflow = %(workflow)s)
   and (%(state)s::text is null or state = %(state)s)
   and (%(trigger)s::text is null or trigger_kind = %(trigger)s)
   and (%(since)s::timestamptz is null or created_at >= %(since)s)
   and (%(until)s::timestamptz is null or created_at < %(until)s)
 order by created_at desc, run_id
 limit %(limit)s

-- explore_steps --
select * from threadline_read.steps
 where (%(workflow)s::text is null or workflow = %(workflow)s)
   and (%(run_id)s::uuid is null or run_id = %(run_id)s)
   and (%(step)s::text is null or step = %(step)s)
   and (%(outcome)s::text is null or outcome = %(outcome)s)
   and (%(since)s::timestamptz is null or started_at >= %(since)s)
   and (%(until)s::timestamptz is null or started_at < %(until)s)
 order by started_at desc, step_key
 limit %(limit)s

-- explore_attempts --
select * from threadline_read.attempts
 where (%(workflow)s::text is null or workflow = %(workflow)s)
   and (%(run_id)s::uuid is null or run_id = %(run_id)s)
   and (%(step)s::text is null or step = %(step)s)
   and (%(outcome)s::text is null or outcome = %(outcome)s)
   and (%(since)s::timestamptz is null or started_at >= %(since)s)
   and (%(until)s::timestamptz is null or started_at < %(until)s)
 order by started_at desc, step_key, attempt
 limit %(limit)s

-- explore_thread --
select * from threadline_read.thread where run_id = %(run_id)s order by seq limit %(limit)s

-- explore_gates --
select * from threadline_read.gate_waits
 where (%(workflow)s::text is null or workflow = %(workflow)s)
   and (%(run_id)s::uuid is null or run_id = %(run_id)s)
   and (%(open)s::boolean is null or open = %(open)s)
   and (%(since)s::timestamptz is null or asked_at >= %(since)s)
   and (%(until)s::timestamptz is null or asked_at < %(until)s)
 order by asked_at desc, step_key
 limit %(limit)s

-- explore_tokens --
select * from threadline_read.agent_turns
 where (%(workflow)s::text is null or workflow = %(workflow)s)
   and (%(run_id)s::uuid is null or run_id = %(run_id)s)
   and (%(since)s::timestamptz is null or created_at >= %(since)s)
   and (%(until)s::timestamptz is null or created_at < %(until)s)
 order by created_at desc, step_key, turn
 limit %(limit)s

-- explore_workers --
select * from threadline_read.workers
 where (%(kind)s::text is null or kind = %(kind)s)
   and (%(alive)s::boolean is null or alive = %(alive)s)
 order by started_at desc, id
 limit %(limit)s

-- metrics_runs --
-- Runs by workflow and state (the gauge threadline_runs).
select workflow, state, count(*)::bigint as n from threadline_read.runs group by 1, 2 order by 1, 2

-- metrics_step_durations --
-- Finished step tries' durations by workflow, kind and outcome (the histogram's raw values).
select workflow, kind, outcome, duration_s from threadline_read.steps
 where finished_at is not null and duration_s is not null

-- metrics_gate_waits --
-- Decided gates' waits by workflow and decision.
select workflow, decision, wait_s from threadline_read.gate_waits where decided_at is not null

-- metrics_waiting --
-- Open step tries by kind: a bot's with no attempt yet is runnable but unclaimed; a gate's
-- waits for a person.
select kind, count(*) filter (where attempts = 0)::bigint as unclaimed,
       count(*)::bigint as open
  from threadline_read.steps where outcome = 'open' group by 1 order by 1

-- metrics_workers --
select kind, count(*) filter (where alive)::bigint as alive from threadline_read.workers
 group by 1 order by 1

-- metrics_retries --
-- Retries: step tries after a step's first, and attempts after a try's first, by workflow.
select workflow,
       (select count(*) from threadline_read.steps s
         where s.workflow = w.workflow and s.try > 1)::bigint as step_retries,
       (select count(*) from threadline_read.attempts a
         where a.workflow = w.workflow and a.attempt > 1)::bigint as attempt_retries
  from (select distinct workflow from threadline_read.runs) w
 order by 1

-- metrics_tokens --
select workflow, coalesce(sum(tokens_in), 0)::bigint as tokens_in,
       coalesce(sum(tokens_out), 0)::bigint as tokens_out,
       coalesce(sum(cost_usd), 0)::float8 as cost_usd, count(*)::bigint as turns
  from threadline_read.agent_turns group by 1 order by 1

-- metrics_runs_unclaimed --
select threadline_read.runs_unclaimed() as n

-- metrics_limits --
-- Attempts a limit ended (memory, pids, cpu, tmp, timeout) or whose output was cut (output).
select workflow, limit_hit, count(*)::bigint as n from threadline_read.attempts
 where limit_hit is not null group by 1, 2 order by 1, 2

-- explore_run --
select * from threadline_read.runs where run_id = %(run_id)s
