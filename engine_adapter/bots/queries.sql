-- The named queries of engine_adapter.bots: a block is `-- name --`, a comment line, then
-- the query (store/db.py loads every part's queries.sql; a name is unique across them).

-- run_agent --
-- The agent settings a run was spawned with (null: its bot has none).
select agent from threadline.run_threads where run_id = %(run_id)s

-- agent_journal --
-- A step's agent conversation so far, over all its rounds, in thread order: what a new attempt
-- or round resumes from. Its entries' dedupe keys start `agent:<step key>:`.
select dedupe_key, data from threadline.thread_entries
 where run_id = %(run_id)s and starts_with(dedupe_key, %(prefix)s)
   and kind in ('agent.assistant', 'agent.tool')
 order by seq

-- agent_human_messages --
-- People's messages in the run's thread since the step's instruction (and after a seq): what
-- steers a running agent, delivered at its next model turn. A reply that answered a gate (an
-- ask_human question among them) was an answer, not steering.
select seq, author, text from threadline.thread_entries
 where run_id = %(run_id)s and author_kind = 'human' and kind = 'message' and seq > %(after)s
   and not coalesce(data ? 'answered', false)
   and seq > (select seq from threadline.thread_entries
               where run_id = %(run_id)s and dedupe_key = 'instruction:' || %(step_key)s)
 order by seq
 limit 100

-- agent_run_tokens --
-- Tokens a run's agent steps have used so far (its budget counts them all).
select coalesce(sum((data -> 'usage' ->> 'in')::bigint + (data -> 'usage' ->> 'out')::bigint), 0)
         as used
  from threadline.thread_entries
 where run_id = %(run_id)s and kind = 'agent.assistant'

-- claim_step --
-- The next instruction a bot may claim, claimed, in one call (migration 025).
select threadline.claim_step(%(bots)s::text[], %(worker_id)s, %(host)s, %(lease_s)s) as claim

-- report_step --
-- An attempt's end in one call, fenced by its attempt and its secret (migrations 025, 043).
select threadline.report_step(%(queue)s, %(run_id)s, %(step_key)s, %(attempt)s, %(secret)s,
                              %(bot)s, %(outcome)s, %(backoff_s)s, %(note)s, %(message)s,
                              %(terminal_kind)s, %(terminal_text)s, %(payload)s,
                              %(exit_code)s) as result

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

-- secret_env_names --
-- Environment variables that hold a secret of Threadline's (a webhook's secret, an agent bot's
-- model key): never passed to a step, whatever a recipe's `env` says.
select distinct substr(secret, 5) as name from threadline.webhook_triggers
 where secret like 'env:%%'
union
select api_key_env from threadline.bots where api_key_env is not null
