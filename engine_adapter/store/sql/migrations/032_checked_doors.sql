-- The webhook ingress and the viewer hold no table writes: every write the ingress makes goes
-- through a security-definer function that checks its own arguments, and the viewer executes
-- nothing that writes.
--
--   * A run starts only through threadline.spawn_run, for every caller (console, conductor,
--     ingress): the function reads the recipe, its version and hash from the workflow's row
--     itself. The ingress may start only a workflow whose webhook is at the path it names (an
--     event: only one whose on_event matches an event a webhook delivers), with the idempotency
--     key that path and delivery make, and never a child run, a snapshot or carried results.
--   * A resume link decides only by presenting its token: threadline.use_resume_token hashes the
--     token, locks and checks it and marks it used by this transaction. The ingress may then
--     lock that token's run, record a decision on that token's gate as its subject (and its
--     thread entry), audit it and release the gate, all in that same transaction; a decision by
--     link cannot commit without its audit row.
--   * Webhook deliveries and events reach the database through checked functions too.
--   * The console's role may no longer insert API tokens: it mints, through a checked function,
--     only a token an account mints for itself; minting one for another account is the owner's
--     (`threadline token create` mints with the owner's login).
--   * No routine of Threadline's or Absurd's is executable by PUBLIC any more: each role executes
--     what it is granted below. sql/grants.txt lists every privilege each role holds;
--     tests/security/test_grants.py compares it with the database.

-- Custom SQLSTATEs of spawn_run, which spawn.py turns into its own errors.
--   TLS01 no such workflow, TLS02 disabled, TLS03 paused, TLS04 the caller read another version.

-- What a new run keeps of its bot: the fields of bot_config.BotConfig (never the key, only its
-- variable's name), with its model's price as it is now; null when the bot has no settings.
create function threadline.agent_snapshot (p_bot text) returns jsonb
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object(
           'name', b.name, 'base_url', b.base_url, 'model', b.model,
           'temperature', b.temperature, 'max_tokens', b.max_tokens,
           'api_key_env', b.api_key_env, 'max_turns', b.max_turns,
           'max_tokens_per_run', b.max_tokens_per_run,
           'price_in', p.input_per_mtok::float8, 'price_out', p.output_per_mtok::float8)
    from threadline.bots b
    left join threadline.model_prices p on p.model = b.model
   where b.name = p_bot
$$;

-- Whether an enabled workflow has a webhook that delivers event p_event, at the path the event
-- id names: the ingress's event ids are "webhook:<path>:<signature or delivery>" (hooks.py), and
-- a path holds no ":".
create function threadline.webhook_delivers (p_event text, p_event_id text) returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select starts_with(p_event_id, 'webhook:') and exists (
    select 1
      from threadline.webhook_triggers t
      join threadline.workflows w on w.slug = t.workflow
     cross join lateral jsonb_array_elements(w.recipe -> 'webhooks') h
     where t.path = split_part(p_event_id, ':', 2) and w.enabled
       and h ->> 'path' = t.path and h ->> 'event' = p_event)
$$;

-- The one door every run comes through (spawn.py builds the arguments; the payload's schema and
-- the thread's texts are the caller's, for the version it names). Returns the run, whether this
-- call made it (false: the idempotency key's run) and its state.
create function threadline.spawn_run (
  p_queue text, p_task text, p_handler_v integer, p_options jsonb,
  p_workflow text, p_version integer, p_hash text,
  p_payload jsonb, p_trigger jsonb, p_idempotency_key text, p_initiator text, p_opening text,
  p_child jsonb default null,     -- a child run: its place in the parent and what it inherits
  p_snapshot jsonb default null,  -- {recipe, version, hash} run instead of the workflow's
  p_carried jsonb default null    -- a rerun: the results it takes over
)
  returns table (run_id uuid, created boolean, state text)
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  v_caller text := threadline.caller_kind();
  v_wf threadline.workflows;
  v_recipe jsonb;
  v_version integer;
  v_hash text;
  v_limited boolean;
  v_params jsonb;
  v_run uuid;
  v_created boolean;
  v_agent jsonb;
  v_parent uuid := (p_child ->> 'run_id')::uuid;
begin
  if v_caller not in ('owner', 'conductor', 'console', 'hooks') then
    perform threadline.refuse('starting a run');
  end if;
  select * into v_wf from threadline.workflows w where w.slug = p_workflow;
  if v_wf.slug is null then
    raise exception 'no workflow "%"', p_workflow using errcode = 'TLS01';
  end if;
  if v_caller = 'hooks' and not coalesce(
       p_child is null and p_snapshot is null and p_carried is null
       and jsonb_typeof(p_payload) = 'object'
       and case p_trigger ->> 'kind'
         when 'webhook' then
           exists (select 1 from jsonb_array_elements(v_wf.recipe -> 'webhooks') h
                    where h ->> 'path' = p_trigger ->> 'path' and h ->> 'event' is null)
           and p_idempotency_key
               = format('webhook:%s:%s', p_trigger ->> 'path', p_trigger ->> 'delivery')
         when 'event' then
           v_wf.recipe ->> 'on_event' = p_trigger ->> 'event'
           and threadline.webhook_delivers(p_trigger ->> 'event', p_trigger ->> 'event_id')
           and p_idempotency_key = format('event:%s:%s:%s', p_trigger ->> 'event',
                                          p_trigger ->> 'event_id', p_workflow)
         else false
       end, false) then
    perform threadline.refuse(format('starting a run of workflow %s by %s %s', p_workflow,
      coalesce(p_trigger ->> 'kind', 'an unknown trigger'),
      coalesce(p_trigger ->> 'path', p_trigger ->> 'event', '')));
  end if;

  if p_snapshot is not null then  -- a version of its own, whatever the workflow is now
    v_recipe := p_snapshot -> 'recipe';
    v_version := (p_snapshot ->> 'version')::integer;
    v_hash := p_snapshot ->> 'hash';
  elsif v_wf.version is distinct from p_version or v_wf.hash is distinct from p_hash then
    raise exception 'workflow "%" is at version %, not %', p_workflow, v_wf.version, p_version
      using errcode = 'TLS04';
  else
    v_recipe := v_wf.recipe;
    v_version := v_wf.version;
    v_hash := v_wf.hash;
  end if;
  if (p_child is null or p_snapshot is null) and not v_wf.enabled then
    raise exception 'workflow "%" is disabled', p_workflow using errcode = 'TLS02';
  end if;

  -- Under a concurrency cap the handler awaits admission before its first step; a child run
  -- never waits (its parent holds the place).
  v_limited := p_child is null
    and (coalesce(jsonb_typeof(v_recipe -> 'max_concurrent_runs'), 'null') <> 'null'
         or exists (select 1 from threadline.run_limits));
  v_params := jsonb_build_object('v', p_handler_v, 'workflow', p_workflow, 'recipe', v_recipe,
                                 'payload', p_payload);
  if p_child is not null then
    v_params := v_params || jsonb_build_object('inherited',
                                               coalesce(p_child -> 'inherited', '{}'::jsonb));
  end if;
  if p_carried is not null then
    v_params := v_params || jsonb_build_object('carried', p_carried);
  end if;
  if v_limited then
    v_params := v_params || '{"admit": true}'::jsonb;
  end if;
  select t.task_id, t.created into v_run, v_created
    from absurd.spawn_task(p_queue, p_task, v_params, jsonb_strip_nulls(jsonb_build_object(
           'max_attempts', p_options -> 'max_attempts',
           'retry_strategy', p_options -> 'retry_strategy',
           'idempotency_key', 'spawn:' || p_idempotency_key))) t;
  if not v_created then
    return query select v_run, false, (select r.state from threadline.run_threads r
                                        where r.run_id = v_run);
    return;
  end if;
  -- While paused, no new run (the refusal rolls the new task back); a run in flight may still
  -- start its branches and sub-workflows.
  if p_child is null and exists (select 1 from threadline.pause) then
    raise exception 'Threadline is paused: new runs are refused' using errcode = 'TLS03';
  end if;

  -- The agent settings the run keeps for its life: a child run of its parent's bot takes the
  -- parent's (its run started under them), any other run its bot's as they are now.
  if v_parent is not null then
    select r.agent into v_agent from threadline.run_threads r
     where r.run_id = v_parent and r.bot = v_wf.bot and r.agent is not null;
  end if;
  v_agent := coalesce(v_agent, threadline.agent_snapshot(v_wf.bot));
  insert into threadline.run_threads
    (run_id, workflow, workflow_version, recipe_hash, recipe, payload, bot, trigger,
     idempotency_key, initiator, agent, parent_run_id, parent)
  values (v_run, p_workflow, v_version, v_hash, v_recipe, p_payload, v_wf.bot, p_trigger,
          p_idempotency_key, case when p_child is null then p_initiator end, v_agent, v_parent,
          p_child - 'inherited');
  perform threadline.append_entry(v_run, 'system', 'threadline', 'note', null, 'opened',
                                  p_opening,
                                  jsonb_build_object('trigger', p_trigger, 'payload', p_payload));
  if v_limited then
    perform threadline.queue_run(v_run, p_workflow);
    perform threadline.admit_queued(p_queue, p_workflow);
  end if;
  perform threadline.wake('threadline', 'spawn:' || v_run);
  return query select v_run, true, r.state from threadline.run_threads r where r.run_id = v_run;
end;
$$;

-- Only a new run of this transaction is queued (spawn_run's); the admitting functions check
-- their caller too (the viewer made a completed run queued, then pending).
create or replace function threadline.queue_run (p_run_id uuid, p_workflow text) returns void
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  perform threadline.require_caller(array['conductor', 'console', 'hooks'], 'queueing a run');
  perform threadline.lock_admission(p_workflow);
  update threadline.run_threads
     set state = 'queued', admitted_at = null, queue_seq = nextval('threadline.run_queue_seq')
   where run_id = p_run_id and workflow = p_workflow and state = 'pending' and created_at = now();
  if not found then
    raise exception 'run % is not a new run of workflow % in this transaction', p_run_id,
      p_workflow using errcode = 'P0001';
  end if;
end;
$$;

-- Adds p_lines after the first p_after in a function's definition: a check where it belongs,
-- rather than the whole function restated. Refuses a definition that has changed.
create function pg_temp.add_after (p_fn regprocedure, p_after text, p_lines text) returns void
  language plpgsql
as $$
declare
  v_def text := pg_get_functiondef(p_fn);
  v_at integer := strpos(v_def, p_after);
begin
  if v_at = 0 then
    raise exception '% has changed: "%" is not where expected', p_fn, p_after;
  end if;
  execute overlay(v_def placing p_after || p_lines from v_at for length(p_after));
end;
$$;

select pg_temp.add_after(f, E'\nbegin\n', $$  perform threadline.require_caller(
    array['conductor', 'console', 'hooks'], 'admitting runs');
$$)
  from unnest(array['threadline.admit_queued(text, text)',
                    'threadline.admit_all(text)']::regprocedure[]) f;

-- Resume tokens: the transaction that used a token (a decision by it must be in that same one).
alter table threadline.resume_tokens add column used_xact xid8;

-- The token this transaction used for gate p_step_key (all nulls: none).
create function threadline.token_used_here (p_step_key text) returns threadline.resume_tokens
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select * from threadline.resume_tokens
   where gate_key = p_step_key and used_xact = pg_current_xact_id_if_assigned()
$$;

-- (Migration 013's checks call this: a token used at any time no longer counts, only one used
-- by this very transaction.)
create or replace function threadline.token_used_for (p_step_key text) returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select (threadline.token_used_here(p_step_key)).token_hash is not null;
$$;

-- Present a resume token: its sha256 is looked up and locked; unless it is refused ('unknown',
-- 'other run', 'used', 'expired': resume_tokens.py words them) it is marked used, by this
-- transaction. Returns the token's run, gate and subject (and its times, for the words).
create function threadline.use_resume_token (p_token text, p_run_id uuid)
  returns table (refusal text, run_id uuid, gate_key text, subject text,
                 expires_at timestamptz, used_at timestamptz)
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  v_token threadline.resume_tokens;
  v_refusal text;
begin
  perform threadline.require_caller(array['console', 'hooks'], 'using a resume token');
  select * into v_token from threadline.resume_tokens t
   where t.token_hash = encode(sha256(convert_to(p_token, 'UTF8')), 'hex')
     for update;
  v_refusal := case
    when v_token.token_hash is null then 'unknown'
    when p_run_id is not null and v_token.run_id <> p_run_id then 'other run'
    when v_token.used_at is not null then 'used'
    when v_token.expires_at <= now() then 'expired'
  end;
  if v_refusal is null then
    update threadline.resume_tokens t set used_at = now(), used_xact = pg_current_xact_id()
     where t.token_hash = v_token.token_hash;
  end if;
  return query select v_refusal, v_token.run_id, v_token.gate_key, v_token.subject,
                      v_token.expires_at, v_token.used_at;
end;
$$;

-- A run's row, locked for the rest of the transaction (run_state.lock_run). The ingress locks
-- only the run of a token it has used in this transaction.
create function threadline.lock_run (p_run_id uuid) returns setof threadline.run_threads
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  v_caller text := threadline.caller_kind();
begin
  if v_caller = 'hooks' then
    if not exists (select 1 from threadline.resume_tokens
                    where run_id = p_run_id and used_xact = pg_current_xact_id_if_assigned()) then
      perform threadline.refuse(format('locking run %s without its resume token', p_run_id));
    end if;
  elsif v_caller not in ('owner', 'conductor', 'console') then
    perform threadline.refuse('locking a run');
  end if;
  return query select * from threadline.run_threads where run_id = p_run_id for update;
end;
$$;

-- A gate's decision, given as the decisions row's columns (jsonb: columns added later pass
-- through); the step key is unique, so a gate is decided once: null when it was decided already.
-- The ingress records only a decision on the gate of the token it used in this transaction, as
-- that token's subject, by link, for no one else.
create function threadline.record_decision (p_row jsonb) returns timestamptz
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  v_caller text := threadline.caller_kind();
  v_token threadline.resume_tokens;
  v_at timestamptz;
begin
  if v_caller = 'hooks' then
    v_token := threadline.token_used_here(p_row ->> 'step_key');
    if not coalesce(v_token.run_id = (p_row ->> 'run_id')::uuid
                    and v_token.subject = p_row ->> 'actor'
                    and p_row ->> 'via' = 'link'
                    and p_row ->> 'decision' in ('approve', 'deny')
                    and p_row ->> 'on_behalf_of' is null
                    and p_row ->> 'minted_by' is null, false) then
      perform threadline.refuse(format('deciding gate %s other than by its resume token',
                                       p_row ->> 'step_key'));
    end if;
  elsif v_caller not in ('owner', 'conductor', 'console') then
    perform threadline.refuse('recording a decision');
  end if;
  insert into threadline.decisions
  select r.* from jsonb_populate_record(null::threadline.decisions,
                                        p_row || jsonb_build_object('created_at', now())) r
  on conflict (step_key) do nothing
  returning created_at into v_at;
  return v_at;
end;
$$;

-- One decision attempt in the audit, given as its row's columns. The ingress audits only by
-- link: a decided row for the decision it has just recorded by its token, a refused one only
-- for a token issued for that run, gate and subject (or with no subject: an unknown token).
create function threadline.audit_decision (p_row jsonb) returns void
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  v_caller text := threadline.caller_kind();
  v_token threadline.resume_tokens;
begin
  if v_caller = 'hooks' then
    v_token := threadline.token_used_here(p_row ->> 'gate_key');
    if not coalesce(p_row ->> 'via' = 'link' and case p_row ->> 'outcome'
         when 'decided' then
           v_token.subject = p_row ->> 'actor'
           and v_token.run_id = (p_row ->> 'run_id')::uuid
           and exists (select 1 from threadline.decisions d
                        where d.step_key = p_row ->> 'gate_key' and d.actor = p_row ->> 'actor'
                          and d.via = 'link')
         when 'refused' then
           p_row ->> 'actor' is null or exists (
             select 1 from threadline.resume_tokens t
              where t.run_id = (p_row ->> 'run_id')::uuid and t.gate_key = p_row ->> 'gate_key'
                and t.subject = p_row ->> 'actor')
         else false end, false) then
      perform threadline.refuse('auditing a decision other than its resume token''s');
    end if;
  elsif v_caller not in ('owner', 'conductor', 'console') then
    perform threadline.refuse('auditing a decision');
  end if;
  insert into threadline.decision_audit
  select r.* from jsonb_populate_record(null::threadline.decision_audit,
                    p_row || jsonb_build_object('id', nextval('threadline.decision_audit_id_seq'),
                                                'created_at', now())) r;
end;
$$;

-- A decision by link commits only with its audit row (whoever wrote it).
create function threadline.link_decision_audited () returns trigger
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  if not exists (select 1 from threadline.decision_audit a
                  where a.gate_key = new.step_key and a.run_id = new.run_id
                    and a.actor = new.actor and a.via = 'link' and a.outcome = 'decided') then
    raise exception 'the decision by link on gate % has no audit row', new.step_key
      using errcode = 'insufficient_privilege';
  end if;
  return null;
end;
$$;
create constraint trigger decisions_by_link_audited after insert on threadline.decisions
  deferrable initially deferred
  for each row when (new.via = 'link')
  execute function threadline.link_decision_audited();

-- An accepted webhook delivery: only for the run its path and delivery started.
create function threadline.record_webhook_delivery (
  p_path text, p_delivery text, p_signature text, p_run_id uuid, p_caller text
) returns uuid
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  v_run uuid;
begin
  perform threadline.require_caller(array['hooks'], 'recording a webhook delivery');
  if not exists (select 1 from threadline.run_threads r
                  where r.run_id = p_run_id and r.trigger ->> 'kind' = 'webhook'
                    and r.trigger ->> 'path' = p_path and r.trigger ->> 'delivery' = p_delivery) then
    perform threadline.refuse(format('recording a delivery at %s for run %s', p_path, p_run_id));
  end if;
  insert into threadline.webhook_deliveries (path, delivery, signature, run_id, caller)
  values (p_path, p_delivery, p_signature, p_run_id, p_caller)
  on conflict do nothing
  returning run_id into v_run;
  return v_run;
end;
$$;

-- A new API token, given as its row's columns. The console's role (the CLI's door for people)
-- mints only a token an account mints for itself; one minted for another account, an admin's
-- act, needs the owner's login (`threadline token create` uses it).
create function threadline.mint_api_token (p_row jsonb) returns void
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  if threadline.caller_kind() = 'console' then
    if not coalesce(p_row ->> 'account_id' = p_row ->> 'minted_by', false) then
      perform threadline.refuse('minting an API token for another account');
    end if;
  elsif threadline.caller_kind() <> 'owner' then
    perform threadline.refuse('minting an API token');
  end if;
  insert into threadline.api_tokens
  select r.* from jsonb_populate_record(null::threadline.api_tokens,
                    p_row || jsonb_build_object('created_at', now(), 'revoked_at', null,
                                                'last_used_at', null)) r;
end;
$$;

-- An outside event: the ingress delivers only one that a webhook delivers, under that webhook's
-- path (migration 010's function, with that check after its caller's).
select pg_temp.add_after('threadline.deliver_event(text, text, text, text, jsonb, jsonb)',
                         $$'delivering an event');
$$, $$  if threadline.caller_kind() = 'hooks'
     and not threadline.webhook_delivers(p_name, p_event_id) then
    perform threadline.refuse(format('delivering event %s as %s', p_name, p_event_id));
  end if;
$$);

-- The ingress may write only into a run it started in this transaction (its opening and queued
-- notes) and, as a person, only the decision entry of the gate whose token it used in this
-- transaction, as that token's subject (migration 013's function, with those checks).
create or replace function threadline.append_entry (
  p_run_id uuid, p_author_kind text, p_author text, p_kind text,
  p_step_key text, p_dedupe_key text, p_text text, p_data jsonb
)
  returns integer
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  v_seq integer;
  v_bot text;
  v_created timestamptz;
  v_token threadline.resume_tokens;
  v_caller text := threadline.caller_kind();
begin
  if not (v_caller in ('owner', 'hooks')
          or (v_caller = 'bots' and p_author_kind = 'bot')
          or (v_caller = 'conductor' and p_author_kind = 'system')
          or (v_caller = 'console' and p_author_kind in ('human', 'system'))) then
    perform threadline.refuse(format('writing a %s entry', p_author_kind));
  end if;
  select next_seq, bot, created_at into v_seq, v_bot, v_created
    from threadline.run_threads where run_id = p_run_id for update;
  if v_seq is null then
    raise exception 'run % not found', p_run_id using errcode = 'P0002';
  end if;
  if v_caller = 'hooks' then
    v_token := threadline.token_used_here(p_step_key);
    if not coalesce((p_author_kind = 'system' and v_created = now())
                    or (p_author_kind = 'human' and p_kind = 'decision'
                        and v_token.run_id = p_run_id and v_token.subject = p_author), false) then
      perform threadline.refuse(format('writing a %s entry', p_author_kind));
    end if;
  end if;
  if p_author_kind = 'bot' and p_author <> v_bot then
    raise exception 'bot "%" may not write to run %: its thread is bound to bot "%"',
      p_author, p_run_id, v_bot using errcode = 'P0001';
  end if;
  if p_dedupe_key is not null and exists (
    select 1 from threadline.thread_entries where run_id = p_run_id and dedupe_key = p_dedupe_key
  ) then
    return null;
  end if;
  insert into threadline.thread_entries
    (run_id, seq, author_kind, author, kind, step_key, dedupe_key, text, data)
  values (p_run_id, v_seq, p_author_kind, p_author, p_kind, p_step_key, p_dedupe_key, p_text, p_data);
  update threadline.run_threads set next_seq = v_seq + 1, updated_at = now() where run_id = p_run_id;
  return v_seq;
end;
$$;

-- Tables: the ingress reads what it serves and writes nothing; the viewer reads. The people's
-- and the engine's doors start runs and record decisions only through the functions above, and
-- the console's role mints no API tokens (an owner's action: `threadline token create`).
revoke all on all tables in schema threadline, absurd from threadline_hooks, threadline_viewer;
revoke all on all sequences in schema threadline, absurd from threadline_hooks, threadline_viewer;
grant select on all tables in schema threadline, absurd to threadline_viewer;
grant select on threadline.workflows, threadline.webhook_triggers, threadline.webhook_deliveries,
  threadline.run_threads, threadline.run_limits, threadline.pause to threadline_hooks;
revoke insert on threadline.run_threads, threadline.decisions from threadline_conductor,
  threadline_console;
revoke insert on threadline.decision_audit, threadline.api_tokens from threadline_console;
revoke update (used_at) on threadline.resume_tokens from threadline_console;
revoke usage on sequence threadline.decision_audit_id_seq from threadline_console;

-- Routines: none for PUBLIC (an extension's own excepted); each role executes what it needs.
do $$
declare
  v_fn regprocedure;
begin
  for v_fn in
    select p.oid::regprocedure
      from pg_proc p
     where p.pronamespace in ('threadline'::regnamespace, 'absurd'::regnamespace)
       and p.prokind in ('f', 'p')
       and not exists (select 1 from pg_depend d
                        where d.classid = 'pg_proc'::regclass and d.objid = p.oid
                          and d.deptype = 'e')
  loop
    execute format('revoke all on routine %s from public, threadline_conductor, '
                   'threadline_bots, threadline_console, threadline_hooks, threadline_viewer',
                   v_fn);
  end loop;
end;
$$;

-- Reading helpers (what views, indexes and read queries call): every role.
grant execute on function threadline.caller_kind (), threadline.active_runs (text),
  threadline.active_top_runs (text), threadline.event_result (threadline.outside_events),
  threadline.run_day (timestamptz), threadline.run_search_text (uuid, jsonb),
  threadline.schedule_ticks_past_retention (jsonb), threadline.worker_alive (integer),
  threadline.step_key_free (text), threadline.feed_followed (), absurd."current_time" (),
  absurd.get_schema_version ()
  to threadline_conductor, threadline_bots, threadline_console, threadline_hooks,
     threadline_viewer;

-- Every process that writes: wake-ups, thread entries, a step's release (each checks its caller).
grant execute on function threadline.wake (text, text), threadline.send_wakes (text[], text[]),
  threadline.append_entry (uuid, text, text, text, text, text, text, jsonb),
  threadline.emit_step_done (text, uuid, text, jsonb)
  to threadline_conductor, threadline_bots, threadline_console, threadline_hooks;

-- The engine's worker and the people's doors: they work Absurd and run what the others do.
grant execute on all routines in schema absurd to threadline_conductor, threadline_console;
grant execute on function threadline.lock_admission (text),
  threadline.admit_queued (text, text), threadline.release_wait (text, text, jsonb),
  threadline.delete_runs (uuid[]), threadline.delete_outputs (uuid[]),
  threadline.cleanup_engine_events (integer), threadline.prune_dead_workers (),
  threadline.prune_schedule_ticks (jsonb, integer), threadline.fold_run_counts ()
  to threadline_conductor, threadline_console;
grant execute on function threadline.register_wait (text, uuid, text, text[], text),
  threadline.send_entry (uuid, text, text, text, jsonb, text, text, integer, text, text, text)
  to threadline_conductor;
grant execute on function threadline.claim_step (text[], text, text, double precision),
  threadline.report_step (text, uuid, text, integer, text, text, double precision, text, text,
                          text, text, jsonb, integer)
  to threadline_bots;
grant execute on function threadline.emit_retry (text, uuid, text, jsonb),
  threadline.emit_debug_event (text, text, jsonb), threadline.follow_feed (),
  threadline.mint_api_token (jsonb)
  to threadline_console;

-- The checked doors of this migration.
grant execute on function
  threadline.spawn_run (text, text, integer, jsonb, text, integer, text, jsonb, jsonb, text, text,
                        text, jsonb, jsonb, jsonb),
  threadline.lock_run (uuid), threadline.record_decision (jsonb),
  threadline.deliver_event (text, text, text, text, jsonb, jsonb)
  to threadline_conductor, threadline_console, threadline_hooks;
grant execute on function threadline.use_resume_token (text, uuid),
  threadline.audit_decision (jsonb)
  to threadline_console, threadline_hooks;
grant execute on function
  threadline.record_webhook_delivery (text, text, text, uuid, text) to threadline_hooks;
