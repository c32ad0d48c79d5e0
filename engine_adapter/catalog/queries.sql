-- The named queries of engine_adapter.catalog: a block is `-- name --`, a comment line, then
-- the query (store/db.py loads every part's queries.sql; a name is unique across them).

-- run_initiator --
-- Who started a run's tree: the top-level run's trigger caller (a child run's is its root's).
with recursive up as (
  select run_id, parent_run_id, trigger, 0 as depth
    from threadline.run_threads where run_id = %(run_id)s
  union all
  select r.run_id, r.parent_run_id, r.trigger, up.depth + 1
    from threadline.run_threads r join up on r.run_id = up.parent_run_id
   where up.depth < 100
)
select trigger ->> 'caller' as caller from up where parent_run_id is null

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

-- insert_proposal --
-- Through the checked door of migration 047 (as are the writes below).
select * from threadline.insert_proposal(%(row)s)

-- lock_proposal --
select (l.proposal).*, l.expired from threadline.lock_proposal(%(id)s) l

-- get_proposal --
select *, expires_at <= now() as expired from threadline.proposals where id = %(id)s

-- list_proposals --
select id, workflow, summary, risk, status, proposed_by, created_at, expires_at, reviewed_by
  from threadline.proposals
 where %(workflow)s::text is null or workflow = %(workflow)s
 order by id desc
 limit 200

-- set_proposal_status --
select threadline.set_proposal_status(%(id)s, %(status)s)

-- proposal_applied --
select threadline.proposal_applied(%(id)s, %(version)s)

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

-- admit_queued --
-- Admit the workflow's first queued runs in line while it has room (see migration 002).
select threadline.admit_queued(%(queue)s, %(workflow)s) as admitted

-- set_workflow_enabled --
-- Enable or disable a workflow; disabling stops its schedule, events and webhooks at once.
select * from threadline.set_workflow_enabled(%(slug)s, %(enabled)s)
