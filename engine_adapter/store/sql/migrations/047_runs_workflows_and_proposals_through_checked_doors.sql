-- The conductor's and the console's logins write a run's state, a workflow and a proposal only
-- through the checked functions below (issue 22: process logins hold no table writes).
--
--   * A run's state moves through threadline.set_run_state: a cancelled run never changes, a
--     completed one never leaves completed, and a failed one changes only while the conductor
--     works its retried task, or by a person's retry. The console's login moves a run only for a
--     person allowed to cancel (to cancelled) or retry (failed to running) in this transaction
--     (threadline.authenticate, migration 045). Outputs are the conductor's, a retried run's bot
--     settings are taken again only under a retry.
--   * A workflow is locked, versioned and enabled only by the console's login for a person
--     allowed to apply, roll back, apply a proposal or enable it; a version is written only with
--     its workflow's row, so none is forged beside it, a rollback only to a version that exists
--     with that recipe, a proposal's version only for an approved proposal of that recipe. The
--     webhook triggers follow the workflow's row (migration 003's trigger), never written apart.
--   * A proposal is made by a person allowed to propose, in that person's name, or by the
--     conductor for a running run's agent on that run's own workflow and version; reviewed only
--     by an approver who is none of its authors; marked stale, expired or applied only when it is.
-- The owner's login (the CLI) is not asked, as in migration 045: the rules are checked in
-- authorization.py first, these checks hold the doors the rules cannot see.

create function threadline.set_run_state (
  p_run_id uuid, p_state text, p_step text, p_try integer, p_await_key text,
  p_await_kind text, p_wake_at timestamptz
) returns uuid
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  v_caller text := threadline.caller_kind();
  v_old text;
  v_task text;
  v_what text := format('moving run %s to %s', p_run_id, p_state);
begin
  perform threadline.require_caller(array['conductor', 'console'], 'setting a run''s state');
  select r.state into v_old from threadline.run_threads r where r.run_id = p_run_id for update;
  if v_old is null or v_old = 'cancelled' then
    return null;  -- a cancelled run stays so, whoever writes after it
  end if;
  if v_old = 'completed' and p_state <> 'completed' then
    perform threadline.refuse(v_what || ' (it completed)');
  end if;
  if v_caller = 'console' then
    if p_state = 'cancelled' then
      perform threadline.console_actor(array['cancel'], 'cancelling a run');
    elsif p_state = 'running' and v_old = 'failed' then
      perform threadline.console_actor(array['retry'], 'retrying a run');
    else
      perform threadline.console_actor(array['cancel', 'retry'], v_what);
      perform threadline.refuse(v_what || ' (a person only cancels a run or retries a failed one)');
    end if;
  elsif v_caller = 'conductor' and v_old = 'failed' and p_state <> 'failed' then
    select t.state into v_task from absurd.t_threadline t where t.task_id = p_run_id;
    if v_task is distinct from 'running' then
      perform threadline.refuse(v_what || ' (it failed, and no retry of it runs)');
    end if;
  end if;
  update threadline.run_threads
     set state = p_state, current_step = p_step, current_try = p_try,
         await_key = p_await_key, await_kind = p_await_kind, awaiting = p_await_key is not null,
         wake_at = p_wake_at, updated_at = now(),
         finished_at = case when p_state in ('completed', 'failed', 'cancelled') then now() end
   where run_id = p_run_id;
  return p_run_id;
end;
$$;

-- A finishing run's outputs: the conductor's, for a run that has not ended.
create function threadline.set_run_outputs (p_run_id uuid, p_outputs jsonb) returns void
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  perform threadline.require_caller(array['conductor'], 'setting a run''s outputs');
  update threadline.run_threads set outputs = p_outputs
   where run_id = p_run_id and state not in ('completed', 'cancelled');
end;
$$;

-- A retried run's bot settings, taken again as they are now (migration 040), under a retry.
create function threadline.retake_run_agent (p_run_id uuid)
  returns table (bot text, before jsonb, after jsonb)
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  perform threadline.require_caller(array['console'], 'taking a run''s bot settings again');
  perform threadline.console_actor(array['retry'], 'taking a run''s bot settings again');
  return query
    with b as (select r.run_id, r.agent from threadline.run_threads r where r.run_id = p_run_id)
    update threadline.run_threads r set agent = threadline.agent_snapshot(r.bot)
      from b
     where r.run_id = b.run_id
    returning r.bot, b.agent, r.agent;
end;
$$;

-- The conductor's thread entry that arms a wait moves the run through the checked door too.
create or replace function threadline.send_entry (
  p_run_id uuid, p_kind text, p_text text, p_step_key text, p_data jsonb, p_state text,
  p_step text, p_try integer, p_await_kind text, p_channel text, p_wake text
) returns integer
  language plpgsql
  set search_path = pg_catalog, pg_temp
as $$
declare
  v_seq integer;
begin
  v_seq := threadline.append_entry(p_run_id, 'system', 'threadline', p_kind, p_step_key,
                                   p_kind || ':' || p_step_key, p_text, p_data);
  if v_seq is not null then
    perform threadline.set_run_state(p_run_id, p_state, p_step, p_try, p_step_key, p_await_kind,
                                     null);
  end if;
  if p_channel is not null then
    perform threadline.wake(p_channel, p_wake);
  end if;
  return v_seq;
end;
$$;

-- The actions under which a workflow's row changes.
create function threadline.workflow_actor (p_what text) returns jsonb
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select threadline.console_actor(array['apply_recipe', 'rollback', 'apply_proposal'], p_what)
$$;

-- A workflow's row, locked while a new version is written.
create function threadline.lock_workflow (p_slug text) returns setof threadline.workflows
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  perform threadline.require_caller(array['console'], 'locking a workflow');
  perform threadline.workflow_actor('locking a workflow');
  return query select * from threadline.workflows w where w.slug = p_slug for update;
end;
$$;

-- The workflow's schedule, its row locked against other tickers and edits (the conductor's
-- ticker); nothing when it is disabled or cleared.
create function threadline.lock_scheduled_workflow (p_slug text)
  returns table (slug text, schedule text, timezone text, schedule_enabled_at timestamptz,
                 catch_up text)
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  perform threadline.require_caller(array['conductor'], 'locking a workflow''s schedule');
  return query
    select w.slug, w.schedule, w.timezone, w.schedule_enabled_at,
           coalesce(w.recipe ->> 'catch_up', 'latest')
      from threadline.workflows w
     where w.slug = p_slug and w.enabled and w.schedule is not null
       for no key update;
end;
$$;

-- A new version of a workflow: its row (made at version 1, or moved on) and the version's
-- immutable snapshot, written together; the version's number. source 'proposal' only for a
-- proposal approved with this recipe on the current version, a rollback only to a version of
-- the workflow that holds this recipe.
create function threadline.store_workflow_version (p_row jsonb) returns integer
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  v_slug text := p_row ->> 'slug';
  v_hash text := p_row ->> 'hash';
  v_source text := p_row ->> 'source';
  v_from integer := (p_row ->> 'rolled_back_from')::integer;
  v_current threadline.workflows;
  v_version integer;
begin
  perform threadline.require_caller(array['console'], 'writing a workflow version');
  if v_source = 'proposal' then
    perform threadline.console_actor(array['apply_proposal'], 'applying a proposal');
    if not exists (
      select 1 from threadline.proposals p join threadline.workflows w on w.slug = p.workflow
       where p.workflow = v_slug and p.status = 'approved' and p.proposed_hash = v_hash
         and p.base_hash = w.hash and p.expires_at > now()) then
      perform threadline.refuse(format('writing workflow %s as a proposal no one approved',
                                       v_slug));
    end if;
  elsif v_source = 'rollback' then
    perform threadline.console_actor(array['rollback'], 'rolling back a workflow');
    if not exists (select 1 from threadline.workflow_versions v
                    where v.slug = v_slug and v.version = v_from and v.hash = v_hash) then
      perform threadline.refuse(format('rolling workflow %s back to a version it has not', v_slug));
    end if;
  elsif v_source in ('create', 'update') then
    perform threadline.console_actor(array['apply_recipe'], 'applying a recipe');
    v_from := null;
  else
    raise exception 'a version''s source is create, update, rollback or proposal, not %',
      coalesce(v_source, 'none') using errcode = '22023';
  end if;
  select * into v_current from threadline.workflows w where w.slug = v_slug for update;
  if v_current.slug is null then
    insert into threadline.workflows (slug, name, description, bot, recipe, schedule, timezone,
                                      version, hash)
    values (v_slug, p_row ->> 'name', p_row ->> 'description', p_row ->> 'bot',
            p_row -> 'recipe', p_row ->> 'schedule', p_row ->> 'timezone', 1, v_hash);
    v_version := 1;
    v_source := 'create';
  else
    update threadline.workflows w
       set name = p_row ->> 'name', description = p_row ->> 'description', bot = p_row ->> 'bot',
           recipe = p_row -> 'recipe', schedule = p_row ->> 'schedule',
           timezone = p_row ->> 'timezone', version = w.version + 1, hash = v_hash,
           updated_at = now()
     where w.slug = v_slug
    returning w.version into v_version;
  end if;
  insert into threadline.workflow_versions (slug, version, hash, recipe, source, rolled_back_from,
                                            source_text)
  values (v_slug, v_version, v_hash, p_row -> 'recipe', v_source, v_from,
          p_row ->> 'source_text');
  return v_version;
end;
$$;

-- Enable or disable a workflow, for a person allowed to.
create function threadline.set_workflow_enabled (p_slug text, p_enabled boolean)
  returns table (slug text, enabled boolean)
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  perform threadline.require_caller(array['console'], 'enabling or disabling a workflow');
  perform threadline.console_actor(array['enable_workflow'], 'enabling or disabling a workflow');
  return query
    update threadline.workflows w set enabled = p_enabled, updated_at = now()
     where w.slug = p_slug
    returning w.slug, w.enabled;
end;
$$;

-- Who a label names ("root for alice", "bob, via a token minted by root": root, bob).
create function threadline.name_of_label (p_label text) returns text
  language sql immutable
  set search_path = pg_catalog, pg_temp
as $$
  select regexp_replace(p_label, '( for |, via a token minted by ).*$', '')
$$;

-- A new open proposal: on a workflow that takes proposals, on its current version, changing it;
-- a person's in the name of the person who signed in, the conductor's only for a run's agent
-- proposing to that running run's own workflow from the version the run was started on.
create function threadline.insert_proposal (p_row jsonb) returns setof threadline.proposals
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  v_caller text := threadline.caller_kind();
  v_actor jsonb;
  v_run threadline.run_threads;
  v_workflow threadline.workflows;
  v_what text := format('proposing a change to workflow %s', p_row ->> 'workflow');
begin
  perform threadline.require_caller(array['conductor', 'console'], 'proposing a change');
  if v_caller = 'console' then
    v_actor := threadline.console_actor(array['propose'], 'proposing a change');
    if (p_row ->> 'proposed_by') is distinct from (v_actor ->> 'label')
       or p_row ->> 'run_id' is not null then
      perform threadline.refuse(v_what || ' in the name of ' || (p_row ->> 'proposed_by'));
    end if;
  elsif v_caller = 'conductor' then
    select * into v_run from threadline.run_threads r
     where r.run_id = (p_row ->> 'run_id')::uuid;
    if not coalesce(v_run.state not in ('completed', 'failed', 'cancelled')
                    and v_run.workflow = p_row ->> 'workflow'
                    and v_run.recipe_hash = p_row ->> 'base_hash'
                    and p_row ->> 'proposed_by' = v_run.bot || ' (agent)'
                    and p_row ->> 'proposed_via' = 'system', false) then
      perform threadline.refuse(v_what
        || ' but for a running run''s agent, on that run''s workflow and version');
    end if;
  end if;
  select * into v_workflow from threadline.workflows w where w.slug = p_row ->> 'workflow';
  if not coalesce((v_workflow.recipe ->> 'allow_proposals')::boolean
                  and v_workflow.hash = p_row ->> 'base_hash'
                  and v_workflow.hash <> p_row ->> 'proposed_hash', false) then
    perform threadline.refuse(v_what
      || ' (it must take proposals, and the proposal must change its current version)');
  end if;
  return query
    insert into threadline.proposals (workflow, base_hash, proposed, proposed_hash, summary, diff,
                                      risk, risk_reasons, proposed_by, proposed_via, run_id,
                                      proposed_text)
    values (p_row ->> 'workflow', p_row ->> 'base_hash', p_row -> 'proposed',
            p_row ->> 'proposed_hash', p_row ->> 'summary', p_row ->> 'diff', p_row ->> 'risk',
            array(select jsonb_array_elements_text(p_row -> 'risk_reasons')),
            p_row ->> 'proposed_by', p_row ->> 'proposed_via', (p_row ->> 'run_id')::uuid,
            p_row ->> 'proposed_text')
    returning *;
end;
$$;

-- A proposal's row, locked while it is reviewed or applied.
create function threadline.lock_proposal (p_id bigint)
  returns table (proposal threadline.proposals, expired boolean)
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  perform threadline.require_caller(array['console'], 'locking a proposal');
  perform threadline.console_actor(array['review_proposal', 'apply_proposal'],
                                   'locking a proposal');
  return query select p, p.expires_at <= now() from threadline.proposals p where p.id = p_id
                  for update;
end;
$$;

-- An open proposal approved or rejected: by the person who signed in, an approver who is none
-- of its authors (who made it, and who started the run whose agent made it).
create function threadline.review_proposal (
  p_id bigint, p_status text, p_actor text, p_note text
) returns void
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  v_actor jsonb := threadline.console_actor(array['review_proposal'], 'reviewing a proposal');
  v_row threadline.proposals;
  v_name text;
begin
  perform threadline.require_caller(array['console'], 'reviewing a proposal');
  select * into v_row from threadline.proposals p where p.id = p_id for update;
  if not coalesce(v_row.status = 'open' and v_row.expires_at > now()
                  and p_status in ('approved', 'rejected'), false) then
    perform threadline.refuse(format('marking proposal %s %s (it is not open)', p_id, p_status));
  end if;
  if v_actor is not null then
    v_name := v_actor ->> 'name';
    if p_actor is distinct from v_actor ->> 'label'
       or v_name = threadline.name_of_label(v_row.proposed_by)
       or v_name = (select threadline.name_of_label(r.trigger ->> 'caller')
                      from threadline.run_threads r where r.run_id = v_row.run_id) then
      perform threadline.refuse_person(v_actor ->> 'label', 'review proposal ' || p_id,
        'a proposal is reviewed in one''s own name, by someone other than its authors');
    end if;
  end if;
  update threadline.proposals p
     set status = p_status, reviewed_by = p_actor, review_note = p_note, reviewed_at = now()
   where p.id = p_id;
end;
$$;

-- A proposal marked stale (its base is no longer its workflow's version) or expired (past its
-- time), only when it is.
create function threadline.set_proposal_status (p_id bigint, p_status text) returns void
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  perform threadline.require_caller(array['console'], 'marking a proposal');
  perform threadline.console_actor(array['review_proposal', 'apply_proposal'],
                                   'marking a proposal');
  update threadline.proposals p set status = p_status
   where p.id = p_id and p.status in ('open', 'approved')
     and ((p_status = 'expired' and p.expires_at <= now())
          or (p_status = 'stale' and p.base_hash is distinct from
               (select w.hash from threadline.workflows w where w.slug = p.workflow)));
  if not found then
    perform threadline.refuse(format('marking proposal %s %s (it is not)', p_id, p_status));
  end if;
end;
$$;

-- An approved proposal marked applied, as its workflow's current version holding its recipe.
create function threadline.proposal_applied (p_id bigint, p_version integer) returns void
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  perform threadline.require_caller(array['console'], 'marking a proposal applied');
  perform threadline.console_actor(array['apply_proposal'], 'applying a proposal');
  update threadline.proposals p
     set status = 'applied', applied_version = p_version, applied_at = now()
   where p.id = p_id and p.status = 'approved'
     and exists (select 1 from threadline.workflows w
                  where w.slug = p.workflow and w.version = p_version
                    and w.hash = p.proposed_hash);
  if not found then
    perform threadline.refuse(format('marking proposal %s applied as version %s', p_id,
                                     p_version));
  end if;
end;
$$;

-- Grants: the functions, to the logins whose doors call them; no table or sequence write left.
do $$
declare
  v_fn regprocedure;
begin
  foreach v_fn in array array[
    'threadline.set_run_state(uuid, text, text, integer, text, text, timestamptz)',
    'threadline.set_run_outputs(uuid, jsonb)', 'threadline.retake_run_agent(uuid)',
    'threadline.workflow_actor(text)', 'threadline.lock_workflow(text)',
    'threadline.lock_scheduled_workflow(text)', 'threadline.store_workflow_version(jsonb)',
    'threadline.set_workflow_enabled(text, boolean)', 'threadline.name_of_label(text)',
    'threadline.insert_proposal(jsonb)', 'threadline.lock_proposal(bigint)',
    'threadline.review_proposal(bigint, text, text, text)',
    'threadline.set_proposal_status(bigint, text)', 'threadline.proposal_applied(bigint, integer)']
  loop
    execute format('revoke all on routine %s from public', v_fn);
  end loop;
end;
$$;
grant execute on function
  threadline.set_run_state (uuid, text, text, integer, text, text, timestamptz),
  threadline.insert_proposal (jsonb)
  to threadline_conductor, threadline_console;
grant execute on function
  threadline.set_run_outputs (uuid, jsonb), threadline.lock_scheduled_workflow (text)
  to threadline_conductor;
grant execute on function
  threadline.retake_run_agent (uuid), threadline.lock_workflow (text),
  threadline.store_workflow_version (jsonb), threadline.set_workflow_enabled (text, boolean),
  threadline.lock_proposal (bigint), threadline.review_proposal (bigint, text, text, text),
  threadline.set_proposal_status (bigint, text), threadline.proposal_applied (bigint, integer)
  to threadline_console;

revoke insert, update, delete on threadline.run_threads, threadline.workflows,
  threadline.workflow_versions, threadline.webhook_triggers, threadline.proposals
  from threadline_conductor, threadline_console;
revoke usage, update on sequence threadline.proposals_id_seq
  from threadline_conductor, threadline_console;
