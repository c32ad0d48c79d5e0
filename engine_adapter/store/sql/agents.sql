-- upsert_bot --
-- `threadline bot apply`: create or replace one agent bot's settings (migration 011).
insert into threadline.bots (name, base_url, model, temperature, max_tokens, api_key_env, max_turns,
                            max_tokens_per_run)
values (%(name)s, %(base_url)s, %(model)s, %(temperature)s, %(max_tokens)s, %(api_key_env)s,
        %(max_turns)s, %(max_tokens_per_run)s)
on conflict (name) do update
   set base_url = excluded.base_url, model = excluded.model, temperature = excluded.temperature,
       max_tokens = excluded.max_tokens, api_key_env = excluded.api_key_env,
       max_turns = excluded.max_turns, max_tokens_per_run = excluded.max_tokens_per_run,
       updated_at = now()

-- list_bots --
-- Every agent bot, by name.
select name, base_url, model, temperature, max_tokens, api_key_env, max_turns,
       max_tokens_per_run, updated_at
  from threadline.bots order by name

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

-- bots_of_agent_steps --
-- The bots that enabled workflows' dispatch_task steps go to (nested steps included).
select distinct w.bot
  from threadline.workflows w
 where w.enabled
   and jsonb_path_exists(w.recipe, 'strict $.**.dispatch_task')

-- set_model_price --
insert into threadline.model_prices (model, input_per_mtok, output_per_mtok)
values (%(model)s, %(input)s, %(output)s)
on conflict (model) do update
   set input_per_mtok = excluded.input_per_mtok, output_per_mtok = excluded.output_per_mtok,
       updated_at = now()

-- list_model_prices --
select model, input_per_mtok::float8 as input, output_per_mtok::float8 as output, updated_at
  from threadline.model_prices order by model

-- remove_model_price --
delete from threadline.model_prices where model = %(model)s returning model

-- run_agent_use --
-- A run's agent turns: tokens in and out, and cost where its model was priced.
select coalesce(sum((data -> 'usage' ->> 'in')::bigint), 0)::bigint as "in",
       coalesce(sum((data -> 'usage' ->> 'out')::bigint), 0)::bigint as "out",
       sum((data -> 'usage' ->> 'cost_usd')::float8) as cost_usd,
       count(*)::int as turns
  from threadline.thread_entries
 where run_id = %(run_id)s and kind = 'agent.assistant'
