-- The current schema `threadline`, generated from a freshly migrated database; do not
-- edit it: the migrations in sql/migrations/ are what change it.
-- Regenerate with `.venv/bin/python scripts/current_schema.py`. PostgreSQL 18.

--
-- PostgreSQL database dump
--

--
-- Name: threadline; Type: SCHEMA; Schema: -; Owner: -
--

CREATE SCHEMA threadline;

--
-- Name: active_runs(text); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.active_runs(p_workflow text) RETURNS integer
    LANGUAGE sql STABLE
    AS $$
  select count(*)::integer from threadline.run_threads
   where workflow = p_workflow and admitted_at is not null
     and state not in ('completed', 'failed', 'cancelled');
$$;

--
-- Name: active_top_runs(text); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.active_top_runs(p_initiator text) RETURNS integer
    LANGUAGE sql STABLE
    AS $$
  select count(*)::integer from threadline.run_threads
   where parent_run_id is null and admitted_at is not null
     and state not in ('completed', 'failed', 'cancelled')
     and (p_initiator is null or initiator = p_initiator);
$$;

--
-- Name: admit_all(text); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.admit_all(p_queue text) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_global integer;
  v_cap integer;
  v_run record;
  v_admitted integer := 0;
begin
  perform threadline.require_caller(
    array['conductor', 'console', 'hooks'], 'admitting runs');
  if not exists (select 1 from threadline.run_threads where state = 'queued') then
    return 0;
  end if;
  select max_runs into v_global from threadline.run_limits where kind = 'global';
  for v_run in
    select run_id, workflow, initiator from threadline.run_threads
     where state = 'queued' order by queue_seq for no key update
  loop
    exit when v_global is not null and threadline.active_top_runs(null) >= v_global;
    select (recipe ->> 'max_concurrent_runs')::integer into v_cap
      from threadline.workflows where slug = v_run.workflow;
    continue when v_cap is not null and threadline.active_runs(v_run.workflow) >= v_cap;
    select max_runs into v_cap from threadline.run_limits
     where kind = 'initiator' and name = v_run.initiator;
    continue when v_cap is not null and threadline.active_top_runs(v_run.initiator) >= v_cap;
    if threadline.admit_run(p_queue, v_run.run_id, 'Starting: a place is free.') then
      v_admitted := v_admitted + 1;
    end if;
  end loop;
  return v_admitted;
end;
$$;

--
-- Name: admit_queued(text, text); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.admit_queued(p_queue text, p_workflow text) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_max integer;
  v_run record;
  v_admitted integer := 0;
begin
  perform threadline.require_caller(
    array['conductor', 'console', 'hooks'], 'admitting runs');
  if not exists (select 1 from threadline.run_limits)
     and not exists (select 1 from threadline.workflows w
                      where w.slug = p_workflow
                        and coalesce(jsonb_typeof(w.recipe -> 'max_concurrent_runs'), 'null')
                            <> 'null')
     and not exists (select 1 from threadline.run_threads r
                      where r.workflow = p_workflow and r.state = 'queued') then
    return 0;  -- nothing capped, nothing waiting: no lock to take (see above)
  end if;
  perform threadline.lock_admission(p_workflow);
  if exists (select 1 from threadline.run_limits) then
    return threadline.admit_all(p_queue);
  end if;
  if not exists (select 1 from threadline.run_threads where workflow = p_workflow and state = 'queued') then
    return 0;  -- the common case (checked under the lock: a queued run committed before it is seen)
  end if;
  select (recipe ->> 'max_concurrent_runs')::integer into v_max
    from threadline.workflows where slug = p_workflow;
  for v_run in
    select run_id from threadline.run_threads
     where workflow = p_workflow and state = 'queued'
     order by queue_seq
     limit case when v_max is null then null
                else greatest(v_max - threadline.active_runs(p_workflow), 0) end
     for no key update
  loop
    if threadline.admit_run(p_queue, v_run.run_id,
         'Starting: a place is free (max_concurrent_runs '
           || coalesce(v_max::text, 'no longer set') || ').') then
      v_admitted := v_admitted + 1;
    end if;
  end loop;
  return v_admitted;
end;
$$;

--
-- Name: admit_run(text, uuid, text); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.admit_run(p_queue text, p_run_id uuid, p_note text) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  update threadline.run_threads
     set state = 'pending', admitted_at = absurd.current_time(), updated_at = now()
   where run_id = p_run_id and state = 'queued';
  if not found then
    return false;
  end if;
  perform absurd.emit_event(p_queue, 'threadline.run.admit:' || p_run_id,
                            jsonb_build_object('at', absurd.current_time()));
  if exists (select 1 from threadline.thread_entries
              where run_id = p_run_id and dedupe_key = 'queued') then
    perform threadline.append_entry(p_run_id, 'system', 'threadline', 'note', null, 'admitted',
                                    p_note, null);
  end if;
  perform threadline.wake('threadline', 'admitted:' || p_run_id);
  return true;
end;
$$;

--
-- Name: agent_snapshot(text); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.agent_snapshot(p_bot text) RETURNS jsonb
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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

--
-- Name: announce_change(); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.announce_change() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
begin
  if not threadline.feed_followed() then
    return null;
  end if;
  perform threadline.wake('threadline_changes',
                          tg_table_name || ':' ||
                          coalesce(to_jsonb(coalesce(new, old)) ->> 'run_id', ''));
  return null;
end;
$$;

--
-- Name: api_token_account(text); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.api_token_account(p_token text) RETURNS TABLE(name text, account_id bigint, roles text[], minted_by text, minter_id bigint)
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  update threadline.api_tokens t set last_used_at = now()
    from threadline.accounts a, threadline.accounts m
   where t.token_hash = threadline.sha256_hex(p_token) and t.revoked_at is null
     and a.id = t.account_id and a.removed_at is null and m.id = t.minted_by
  returning a.name, a.id, t.roles, m.name, m.id
$$;

--
-- Name: append_entry(uuid, text, text, text, text, text, text, jsonb); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.append_entry(p_run_id uuid, p_author_kind text, p_author text, p_kind text, p_step_key text, p_dedupe_key text, p_text text, p_data jsonb) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_seq integer;
  v_bot text;
  v_created timestamptz;
  v_token threadline.resume_tokens;
  v_caller text := threadline.caller_kind();
begin
  perform threadline.check_console_entry(p_author_kind, p_author);
  if not (v_caller in ('owner', 'hooks')
          or (v_caller = 'bots' and p_author_kind = 'bot')
          or (v_caller = 'conductor' and p_author_kind = 'system')
          or (v_caller = 'console' and p_author_kind in ('human', 'system'))) then
    perform threadline.refuse(format('writing a %s entry', p_author_kind));
  end if;
  -- A refusal below raises, which undoes this update with everything else.
  update threadline.run_threads set next_seq = next_seq + 1, updated_at = now()
   where run_id = p_run_id
  returning next_seq - 1, bot, created_at into v_seq, v_bot, v_created;
  if v_seq is null then
    raise exception 'run % not found', p_run_id using errcode = 'P0002';
  end if;
  if v_caller = 'bots' and (starts_with(p_kind, 'signal.') or starts_with(p_dedupe_key, 'terminal:'))
     and not exists (select 1 from threadline.step_claims c
                      where c.step_key = p_step_key and c.run_id = p_run_id
                        and c.reported_xact = pg_current_xact_id()) then
    perform threadline.refuse(format('writing a %s entry', p_kind));
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
    -- Written before (a replay): the number goes back, still under the row's lock.
    update threadline.run_threads set next_seq = v_seq where run_id = p_run_id;
    return null;
  end if;
  insert into threadline.thread_entries
    (run_id, seq, author_kind, author, kind, step_key, dedupe_key, text, data)
  values (p_run_id, v_seq, p_author_kind, p_author, p_kind, p_step_key, p_dedupe_key, p_text, p_data);
  return v_seq;
end;
$$;

--
-- Name: audit_authorization(jsonb); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.audit_authorization(p_row jsonb) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  if threadline.caller_kind() = 'console' and p_row ->> 'outcome' = 'allowed'
     and (p_row ->> 'actor') is distinct from (threadline.console_actor(
           array[p_row ->> 'action'], 'auditing an allowed action') ->> 'name') then
    perform threadline.refuse('auditing an action as allowed for another person');
  end if;
  if threadline.caller_kind() not in ('owner', 'console') then
    perform threadline.refuse('auditing an authorization');
  end if;
  insert into threadline.authorization_audit
    (actor, account_id, label, door, action, run_id, workflow, detail, outcome, reason)
  values (p_row ->> 'actor', (p_row ->> 'account_id')::bigint, p_row ->> 'label',
          p_row ->> 'door', p_row ->> 'action', (p_row ->> 'run_id')::uuid,
          p_row ->> 'workflow', p_row -> 'detail', p_row ->> 'outcome', p_row ->> 'reason');
end;
$$;

--
-- Name: audit_decision(jsonb); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.audit_decision(p_row jsonb) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_caller text := threadline.caller_kind();
  v_token threadline.resume_tokens;
begin
  if threadline.caller_kind() = 'console' and p_row ->> 'outcome' = 'decided'
     and (p_row ->> 'actor') is distinct from (threadline.console_actor(
           array['decide', 'reply'], 'auditing a decision') ->> 'name') then
    perform threadline.refuse('auditing a decision by another person');
  end if;
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

--
-- Name: authenticate(text, text, text); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.authenticate(p_credential text, p_action text, p_account text DEFAULT NULL::text) RETURNS jsonb
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_rule threadline.action_rules;
  v_hash text := threadline.sha256_hex(coalesce(p_credential, ''));
  v_actor jsonb;
  v_roles text[];
  v_who text;
begin
  select * into v_rule from threadline.action_rules r where r.action = p_action;
  if v_rule.action is null then
    raise exception 'action "%" is not one of authorization.RULES''s', p_action
      using errcode = '22023';
  end if;
  if coalesce(p_credential, '') = '' then
    perform threadline.refuse_person('nobody', v_rule.verb, 'no credential (sign in again)');
  end if;
  if starts_with(p_credential, 'tl_api_') then
    select jsonb_build_object(
             'name', a.name, 'account_id', a.id, 'roles', to_jsonb(t.roles), 'via', 'api',
             'minted_by', case when m.id <> a.id then m.name end)
      into v_actor
      from threadline.api_tokens t
      join threadline.accounts a on a.id = t.account_id and a.removed_at is null
      join threadline.accounts m on m.id = t.minted_by
     where t.token_hash = v_hash and t.revoked_at is null;
  else
    select jsonb_build_object(
             'name', s.account,
             'account_id', (select a.id from threadline.accounts a
                             where a.name = s.account and a.removed_at is null),
             'roles', to_jsonb(s.roles), 'via', 'console', 'minted_by', null)
      into v_actor
      from threadline.console_sessions s
     where s.session_hash = v_hash and s.closed_at is null and s.expires_at > now();
  end if;
  if v_actor is null then
    perform threadline.refuse_person('nobody', v_rule.verb,
      'the credential is unknown, expired, signed out or revoked');
  end if;
  v_actor := v_actor || jsonb_build_object('label', (v_actor ->> 'name')
    || coalesce(', via a token minted by ' || (v_actor ->> 'minted_by'), ''));
  v_roles := array(select jsonb_array_elements_text(v_actor -> 'roles'));
  v_who := format('%s (%s)', v_actor ->> 'name',
                  coalesce(nullif(array_to_string(array(select unnest(v_roles) order by 1), ', '),
                                  ''), 'no role'))
           || coalesce(', via a token minted by ' || (v_actor ->> 'minted_by'), '');
  if v_rule.admin or (v_rule.admin_for_others and (
       (p_account is not null and p_account <> v_actor ->> 'name')
       or v_actor ->> 'minted_by' is not null)) then
    perform threadline.refuse_person(v_who, v_rule.verb,
      'that is an admin action (root, or the account that owns the install)');
  end if;
  if cardinality(v_rule.roles) > 0 and not v_rule.roles && v_roles then
    perform threadline.refuse_person(v_who, v_rule.verb,
      format('that needs the %s role', array_to_string(v_rule.roles, ' or ')));
  end if;
  delete from threadline.acting a
   where a.xact < pg_snapshot_xmin(pg_current_snapshot());
  insert into threadline.acting (xact, action, actor)
  values (pg_current_xact_id(), p_action, v_actor)
  on conflict (xact, action) do update set actor = excluded.actor;
  return v_actor;
end;
$$;

--
-- Name: beat_worker(text, boolean); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.beat_worker(p_id text, p_stop boolean) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  if not threadline.own_worker(p_id) then
    perform threadline.refuse(format('beating for process %s', p_id));
  end if;
  if p_stop then
    update threadline.workers set stopped_at = now() where id = p_id;
  else
    update threadline.workers set last_beat_at = now() where id = p_id;
  end if;
end;
$$;

--
-- Name: bot_step_waiting(uuid); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.bot_step_waiting(p_run_id uuid) RETURNS boolean
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  select exists (
    select 1
      from threadline.run_threads rt
     where rt.state = 'running' and rt.await_kind = 'bot' and rt.awaiting
       and rt.run_id <> p_run_id
       and rt.bot = (select me.bot from threadline.run_threads me where me.run_id = p_run_id)
       and threadline.step_key_free(rt.await_key))
$$;

--
-- Name: caller_kind(); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.caller_kind() RETURNS text
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  select case
    when r.rolsuper or pg_has_role(session_user,
      (select nspowner from pg_namespace where nspname = 'threadline'), 'member') then 'owner'
    when pg_has_role(session_user, 'threadline_conductor', 'member') then 'conductor'
    when pg_has_role(session_user, 'threadline_bots', 'member') then 'bots'
    when pg_has_role(session_user, 'threadline_console', 'member') then 'console'
    when pg_has_role(session_user, 'threadline_hooks', 'member') then 'hooks'
    when pg_has_role(session_user, 'threadline_viewer', 'member') then 'viewer'
    else 'other'
  end
  from pg_roles r where r.rolname = session_user;
$$;

--
-- Name: cancel_claim(text, integer, text); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.cancel_claim(p_step_key text, p_attempt integer, p_secret text) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  perform threadline.held_claim(p_step_key, p_attempt, p_secret);
  update threadline.step_claims set finished_at = now(), outcome = 'cancelled'
   where step_key = p_step_key and attempt = p_attempt and finished_at is null;
end;
$$;

--
-- Name: cancel_run_task(text, uuid); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.cancel_run_task(p_queue text, p_run_id uuid) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  perform threadline.require_caller(array['conductor', 'console'], 'cancelling a run');
  perform threadline.console_actor(array['cancel'], 'cancelling a run');
  perform absurd.cancel_task(p_queue, p_run_id);
end;
$$;

--
-- Name: check_console_decision(jsonb); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.check_console_decision(p_row jsonb) RETURNS void
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
declare
  v_actor jsonb := threadline.console_actor(array['decide', 'reply'], 'recording a decision');
  v_run threadline.run_threads;
  v_gate jsonb;
  v_initiator text;
begin
  if v_actor is null then
    return;
  end if;
  if not coalesce(p_row ->> 'actor' = v_actor ->> 'name' and p_row ->> 'via' = v_actor ->> 'via'
                  and p_row ->> 'on_behalf_of' is null
                  and (p_row ->> 'minted_by') is not distinct from (v_actor ->> 'minted_by')
                  and p_row ->> 'decision' in ('approve', 'deny', 'reply'), false) then
    perform threadline.refuse_person(v_actor ->> 'label', 'decide gate ' || (p_row ->> 'step_key'),
      'a decision is recorded only as the person who signed in, for no one else');
  end if;
  select * into v_run from threadline.run_threads r where r.run_id = (p_row ->> 'run_id')::uuid;
  if not coalesce(v_run.awaiting and v_run.await_kind = 'gate'
                  and v_run.await_key = p_row ->> 'step_key', false) then
    perform threadline.refuse_person(v_actor ->> 'label', 'decide gate ' || (p_row ->> 'step_key'),
      'the run does not wait at that gate');
  end if;
  v_gate := jsonb_path_query_first(v_run.recipe, 'strict $.**.steps[*] ? (@.id == $id)',
              jsonb_build_object('id', split_part(p_row ->> 'step_key', ':', 2)));
  if jsonb_typeof(v_gate -> 'approvers') = 'array' and jsonb_array_length(v_gate -> 'approvers') > 0
     and not (v_gate -> 'approvers') ? (v_actor ->> 'name') then
    perform threadline.refuse_person(v_actor ->> 'label', 'decide gate ' || (p_row ->> 'step_key'),
      format('%s is not one of its approvers', v_actor ->> 'name'));
  end if;
  if v_gate ? 'human_gate' and not coalesce((v_gate ->> 'self_approval')::boolean, false)
     and v_run.parent_run_id is null then
    v_initiator := regexp_replace(v_run.trigger ->> 'caller', '( for |, via a token minted by ).*$',
                                  '');
    if v_initiator = v_actor ->> 'name' then
      perform threadline.refuse_person(v_actor ->> 'label',
        'decide gate ' || (p_row ->> 'step_key'), 'it started this run');
    end if;
  end if;
end;
$_$;

--
-- Name: check_console_entry(text, text); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.check_console_entry(p_author_kind text, p_author text) RETURNS void
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_actor jsonb := threadline.console_actor(null, format('writing a %s entry', p_author_kind));
begin
  if v_actor is not null and p_author_kind = 'human'
     and p_author is distinct from v_actor ->> 'label' then
    perform threadline.refuse_person(v_actor ->> 'label', 'write in the name of ' || p_author,
      'a person''s entry is written only in the name of the person who signed in');
  end if;
end;
$$;

--
-- Name: child_finished(); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.child_finished() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_payload jsonb := jsonb_build_object(
    'status', new.state, 'run_id', new.run_id, 'branch', new.parent ->> 'branch',
    'outputs', coalesce(new.outputs, '{}'::jsonb));
  v_event text;
begin
  perform absurd.emit_event(tg_argv[0], 'threadline.run.done:' || new.run_id, v_payload);
  for v_event in select jsonb_array_elements_text(coalesce(new.parent -> 'notify', '[]'::jsonb))
  loop
    perform absurd.emit_event(tg_argv[0], v_event, v_payload);
  end loop;
  perform threadline.wake('threadline', 'child:' || new.parent_run_id);
  return null;
end;
$$;

--
-- Name: claim_notifications(double precision, integer); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.claim_notifications(p_lease_s double precision, p_limit integer) RETURNS TABLE(id bigint, run_id uuid, event text, event_key text, channel text, target text, subject text, text text, attempts integer)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
#variable_conflict use_column
begin
  if threadline.caller_kind() not in ('owner', 'conductor') then
    perform threadline.refuse('sending notifications');
  end if;
  if p_lease_s is null or p_lease_s <= 0 or p_lease_s > 3600 or p_limit not between 1 and 1000
  then
    raise exception 'lease_s must be within (0, 3600] and limit within [1, 1000], not % and %',
      p_lease_s, p_limit using errcode = '22023';
  end if;
  return query
  update threadline.notifications n
     set attempts = n.attempts + 1, next_at = now() + make_interval(secs => p_lease_s)
   where n.id in (select d.id from threadline.notifications d
                   where d.status = 'pending' and d.next_at <= now()
                   order by d.id limit p_limit
                   for update skip locked)
  returning n.id, n.run_id, n.event, n.event_key, n.channel, n.target, n.subject, n.text,
            n.attempts;
end;
$$;

--
-- Name: claim_secret_hash(text); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.claim_secret_hash(p_secret text) RETURNS bytea
    LANGUAGE sql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  select sha256(convert_to(coalesce(p_secret, ''), 'UTF8'))
$$;

--
-- Name: claim_step(text[], text, text, double precision); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.claim_step(p_bots text[], p_worker_id text, p_host text, p_lease_s double precision) RETURNS jsonb
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_caller text := threadline.caller_kind();
  v_cand record;
  v_first record;
  v_found integer := 0;
  v_lost jsonb;
  v_attempt integer;
  v_failures integer;
  v_text text;
  v_data jsonb;
  v_secret text;
begin
  if v_caller not in ('owner', 'bots') then
    perform threadline.refuse('claiming a step');
  end if;
  if p_lease_s is null or p_lease_s <= 0 or p_lease_s > 3600 then
    raise exception 'lease_s must be within (0, 3600] seconds, not %', p_lease_s
      using errcode = '22023';
  end if;
  for v_cand in
    select rt.run_id, rt.await_key, rt.bot
      from threadline.run_threads rt
     where rt.state = 'running' and rt.await_kind = 'bot' and rt.awaiting
       and (p_bots is null or rt.bot = any (p_bots))
     order by rt.run_id
  loop
    continue when not threadline.step_key_free(v_cand.await_key);  -- in progress, or done
    if v_found = 0 then
      perform 1 from threadline.run_threads rt
       where rt.run_id = v_cand.run_id and rt.awaiting and rt.await_key = v_cand.await_key
         for no key update skip locked;
      continue when not found;  -- another claim holds it, or its step moved on meanwhile
      v_first := v_cand;
    end if;
    v_found := v_found + 1;
    exit when v_found = 2;  -- a second free step: `more` tells the bot to wake another slot
  end loop;
  if v_found = 0 then
    return '{}'::jsonb;
  end if;
  if not threadline.step_key_free(v_first.await_key) then
    return '{"contended": true}'::jsonb;
  end if;
  -- The caller must be a live bot process (checked last: it asks the lock manager).
  if not exists (select 1 from threadline.live_workers
                  where id = p_worker_id and (kind = 'bots' or v_caller = 'owner')) then
    return '{}'::jsonb;
  end if;
  with lost as (
    update threadline.step_claims
       set finished_at = now(), outcome = 'lost'
     where step_key = v_first.await_key and finished_at is null
    returning attempt, host, pgid, worker_id
  )
  select coalesce(jsonb_agg(to_jsonb(lost)), '[]'::jsonb) into v_lost from lost;
  select coalesce(max(c.attempt), 0) + 1, count(*) filter (where c.outcome = 'failed')
    into v_attempt, v_failures
    from threadline.step_claims c
   where c.step_key = v_first.await_key;
  select e.text, e.data into v_text, v_data
    from threadline.thread_entries e
   where e.run_id = v_first.run_id and e.step_key = v_first.await_key and e.kind = 'instruction';
  v_secret := replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', '');
  insert into threadline.step_claims (step_key, attempt, run_id, worker_id, host, lease_until,
                                      secret_hash)
  values (v_first.await_key, v_attempt, v_first.run_id, p_worker_id, p_host,
          now() + make_interval(secs => p_lease_s), threadline.claim_secret_hash(v_secret));
  return jsonb_build_object(
    'run_id', v_first.run_id, 'step_key', v_first.await_key, 'bot', v_first.bot,
    'attempt', v_attempt, 'failures', v_failures, 'text', v_text, 'data', v_data,
    'lost', v_lost, 'more', v_found > 1, 'secret', v_secret);
end;
$$;

--
-- Name: cleanup_engine_events(integer); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.cleanup_engine_events(p_limit integer) RETURNS integer
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  select absurd.cleanup_events('threadline', (select runs_s from threadline.retention_defaults),
                               p_limit);
$$;

--
-- Name: close_console_session(text); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.close_console_session(p_session text) RETURNS text
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  update threadline.console_sessions s set closed_at = now()
   where s.session_hash = threadline.sha256_hex(p_session)
     and s.closed_at is null and s.expires_at > now()
  returning s.account
$$;

--
-- Name: console_actor(text[], text); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.console_actor(p_actions text[], p_what text) RETURNS jsonb
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_actor jsonb;
begin
  if threadline.caller_kind() <> 'console' then
    return null;
  end if;
  select a.actor into v_actor from threadline.acting a
   where a.xact = pg_current_xact_id_if_assigned()
     and (p_actions is null or a.action = any (p_actions))
   limit 1;
  if v_actor is null then
    raise exception '% needs a signed-in person''s credential (threadline.authenticate, in this '
                    'transaction, for %)', p_what, coalesce(array_to_string(p_actions, ' or '),
                                                           'an action')
      using errcode = 'insufficient_privilege';
  end if;
  return v_actor;
end;
$$;

--
-- Name: console_session(text); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.console_session(p_session text) RETURNS TABLE(account text, roles text[], via text)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  select s.account, s.roles, s.via from threadline.console_sessions s
   where s.session_hash = threadline.sha256_hex(p_session)
     and s.closed_at is null and s.expires_at > now()
$$;

--
-- Name: count_runs(); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.count_runs() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_shard smallint := pg_backend_pid() % 16;
  v_old threadline.run_counts;  -- a count to move, its delta in `runs`
  v_new threadline.run_counts;
  v_row threadline.run_counts;
  v_rows threadline.run_counts[];
begin
  -- (day, workflow, state, step) taken off and put on, each from its own row version; in a fixed
  -- order, so two transactions moving runs in opposite directions (failed -> running by a retry,
  -- running -> failed) never deadlock. Listed as the runs page lists runs: top-level runs and
  -- sub-workflows; parallel branches and foreach items are in their parent.
  if tg_op <> 'INSERT' and (old.parent_run_id is null or old.trigger ->> 'what' = 'sub-workflow') then
    v_old := (threadline.run_day(old.created_at), old.workflow, old.state,
              case when old.state = 'failed' then coalesce(old.current_step, '') else '' end,
              v_shard, -1);
  end if;
  if tg_op <> 'DELETE' and (new.parent_run_id is null or new.trigger ->> 'what' = 'sub-workflow') then
    v_new := (threadline.run_day(new.created_at), new.workflow, new.state,
              case when new.state = 'failed' then coalesce(new.current_step, '') else '' end,
              v_shard, 1);
  end if;
  if v_old.day is null and v_new.day is null then  -- a run never listed
    return null;
  elsif v_old.day is null then
    v_rows := array[v_new];
  elsif v_new.day is null then
    v_rows := array[v_old];
  elsif (v_old.day, v_old.workflow, v_old.state, v_old.step)
        = (v_new.day, v_new.workflow, v_new.state, v_new.step) then  -- nothing counted moved
    return null;
  elsif (v_old.day, v_old.workflow, v_old.state, v_old.step)
        < (v_new.day, v_new.workflow, v_new.state, v_new.step) then
    v_rows := array[v_old, v_new];
  else
    v_rows := array[v_new, v_old];
  end if;
  foreach v_row in array v_rows loop
    update threadline.run_counts c set runs = c.runs + v_row.runs
     where (c.day, c.workflow, c.state, c.step, c.shard)
           = (v_row.day, v_row.workflow, v_row.state, v_row.step, v_row.shard);
    if not found then  -- the first of its kind in this shard (or one writing it alongside)
      insert into threadline.run_counts as c (day, workflow, state, step, shard, runs)
      values (v_row.day, v_row.workflow, v_row.state, v_row.step, v_row.shard, v_row.runs)
      on conflict (day, workflow, state, step, shard)
      do update set runs = c.runs + excluded.runs;
    end if;
  end loop;
  return null;
end;
$$;

--
-- Name: decision_by_token(); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.decision_by_token() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  if threadline.caller_kind() = 'hooks' and not threadline.token_used_for(new.step_key) then
    perform threadline.refuse(format('deciding gate %s without a resume token', new.step_key));
  end if;
  return new;
end;
$$;

--
-- Name: delete_outputs(uuid[]); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.delete_outputs(p_run_ids uuid[]) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_count integer;
begin
  delete from threadline.thread_entries e
   using threadline.run_threads r
   where e.run_id = r.run_id and r.run_id = any (p_run_ids)
     and r.state in ('completed', 'failed', 'cancelled')
     and e.author_kind = 'bot' and e.kind = 'progress';
  get diagnostics v_count = row_count;
  return v_count;
end;
$$;

--
-- Name: delete_runs(uuid[]); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.delete_runs(p_run_ids uuid[]) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_top uuid;
  v_tree uuid[];
  v_locked integer;
  v_ids uuid[] := '{}';
  v_runs integer := 0;
begin
  for v_top in
    select run_id from threadline.run_threads
     where run_id = any (p_run_ids) and parent_run_id is null
       and state in ('completed', 'failed', 'cancelled')
  loop
    with recursive tree as (
      select v_top as run_id
      union all
      select c.run_id from threadline.run_threads c join tree t on c.parent_run_id = t.run_id
    )
    select array_agg(run_id) into v_tree from tree;
    select count(*) into v_locked from (
      select run_id from threadline.run_threads where run_id = any (v_tree)
         for update skip locked) l;
    if v_locked = cardinality(v_tree) then
      v_ids := v_ids || v_tree;
      v_runs := v_runs + 1;
    end if;
  end loop;
  if cardinality(v_ids) = 0 then
    return 0;
  end if;
  delete from threadline.thread_entries where run_id = any (v_ids);
  delete from threadline.step_claims where run_id = any (v_ids);
  delete from threadline.decisions where run_id = any (v_ids);
  delete from threadline.resume_tokens where run_id = any (v_ids);
  delete from threadline.event_waits where run_id = any (v_ids);
  delete from threadline.notifications where run_id = any (v_ids);
  delete from threadline.webhook_deliveries where run_id = any (v_ids);
  delete from threadline.run_journal where run_id = any (v_ids);
  delete from absurd.w_threadline where task_id = any (v_ids);
  delete from absurd.c_threadline where task_id = any (v_ids);
  delete from absurd.r_threadline where task_id = any (v_ids);
  delete from absurd.t_threadline where task_id = any (v_ids);
  delete from threadline.run_threads where run_id = any (v_ids);
  return v_runs;
end;
$$;

--
-- Name: deliver_event(text, text, text, text, jsonb, jsonb); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.deliver_event(p_queue text, p_name text, p_key text, p_event_id text, p_payload jsonb, p_source jsonb) RETURNS text[]
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_event threadline.outside_events;
  v_wait record;
  v_released text[] := '{}';
begin
  perform threadline.require_caller(array['console', 'hooks', 'conductor'], 'delivering an event');
  if threadline.caller_kind() = 'hooks'
     and not threadline.webhook_delivers(p_name, p_event_id) then
    perform threadline.refuse(format('delivering event %s as %s', p_name, p_event_id));
  end if;
  perform threadline.lock_event(p_name, p_key);
  insert into threadline.outside_events (name, key, event_id, payload, source)
  values (p_name, p_key, p_event_id, p_payload, p_source)
  on conflict (name, event_id) do nothing
  returning * into v_event;
  if v_event.id is null then
    return v_released;  -- delivered before: it released what it could then
  end if;
  for v_wait in
    select step_key from threadline.event_waits
     where p_name = any (names) and key is not distinct from p_key
       and since <= v_event.received_at
     order by created_at
     for update
  loop
    if threadline.release_wait(p_queue, v_wait.step_key, threadline.event_result(v_event)) then
      v_released := v_released || v_wait.step_key;
    end if;
  end loop;
  return v_released;
end;
$$;

--
-- Name: emit_debug_event(text, text, jsonb); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.emit_debug_event(p_queue text, p_event text, p_payload jsonb) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  perform threadline.require_caller(array['console'], 'emitting an event by hand');
  if lower(btrim(p_event)) like 'threadline.%' then
    raise exception 'event "%" is Threadline''s own: it is emitted only by its checked paths', p_event
      using errcode = 'insufficient_privilege';
  end if;
  perform absurd.emit_event(p_queue, p_event, p_payload);
end;
$$;

--
-- Name: emit_retry(text, uuid, text, jsonb); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.emit_retry(p_queue text, p_run_id uuid, p_step_key text, p_payload jsonb) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  perform threadline.console_actor(array['retry'], 'retrying a run');
  perform threadline.require_caller(array['console'], 'retrying a run');
  if not exists (select 1 from threadline.run_threads
                  where run_id = p_run_id and state = 'failed'
                    and run_id::text || ':' || current_step || ':' || current_try = p_step_key) then
    raise exception 'run % is not failed at step key %', p_run_id, p_step_key
      using errcode = 'P0001';
  end if;
  perform absurd.emit_event(p_queue, 'threadline.run.retry:' || p_step_key, p_payload);
end;
$$;

--
-- Name: emit_step_done(text, uuid, text, jsonb); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.emit_step_done(p_queue text, p_run_id uuid, p_step_key text, p_payload jsonb) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
declare
  v_caller text := threadline.caller_kind();
  v_run record;
  v_holder_host text;
begin
  if v_caller not in ('owner', 'conductor') then
    select await_key, await_kind into v_run from threadline.run_threads where run_id = p_run_id;
    if v_run.await_key is distinct from p_step_key
       or (v_caller = 'bots' and v_run.await_kind is distinct from 'bot')
       or (v_caller in ('console', 'hooks') and (v_run.await_kind is distinct from 'gate'
           or not exists (select 1 from threadline.decisions where step_key = p_step_key)))
       or (v_caller = 'hooks' and not threadline.token_used_for(p_step_key))
       or v_caller not in ('bots', 'console', 'hooks') then
      perform threadline.refuse(format('releasing step %s', p_step_key));
    end if;
  end if;
  perform absurd.emit_event(p_queue, 'threadline.step.done:' || p_step_key, p_payload);
  update threadline.run_threads
     set awaiting = false, last_emitted_key = p_step_key, updated_at = now()
   where run_id = p_run_id and await_key = p_step_key and awaiting;
  execute format('select w.host from absurd.%I r join threadline.workers w on w.id = r.claimed_by
                   where r.task_id = $1 and r.state = ''running''', 'r_' || p_queue)
     into v_holder_host using p_run_id;
  perform threadline.wake('threadline', 'step.done:' || p_run_id, v_holder_host);
end;
$_$;

--
-- Name: enqueue_notification(uuid, text, text, integer, text, text, text, text); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.enqueue_notification(p_run_id uuid, p_event text, p_event_key text, p_rule integer, p_channel text, p_target text, p_subject text, p_text text) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  if threadline.caller_kind() not in ('owner', 'conductor') then
    perform threadline.refuse('queueing a notification');
  end if;
  if not starts_with(p_event_key, p_run_id::text || ':') then
    raise exception 'event_key % is not a step of run %', p_event_key, p_run_id
      using errcode = '22023';
  end if;
  if p_subject is not null and not exists (
       select 1 from threadline.accounts a
         join threadline.account_channels c on c.account_id = a.id
        where a.name = p_subject and a.removed_at is null
          and c.channel = p_channel and c.target = p_target) then
    perform threadline.refuse(format('sending %s''s links to a %s it did not register',
                                     p_subject, p_channel));
  end if;
  insert into threadline.notifications
    (run_id, event, event_key, rule, channel, target, subject, text)
  values (p_run_id, p_event, p_event_key, p_rule, p_channel, p_target, p_subject, p_text)
  on conflict (event, event_key, rule, target) do nothing;
end;
$$;

--
-- Name: outside_events; Type: TABLE; Schema: threadline; Owner: -
--

CREATE TABLE threadline.outside_events (
    id bigint NOT NULL,
    name text NOT NULL,
    key text,
    event_id text NOT NULL,
    payload jsonb NOT NULL,
    source jsonb,
    received_at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: event_result(threadline.outside_events); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.event_result(p_event threadline.outside_events) RETURNS jsonb
    LANGUAGE sql IMMUTABLE
    AS $$
  select jsonb_build_object('status', 'completed', 'output', p_event.payload,
                            'event', p_event.name, 'event_id', p_event.event_id,
                            'key', p_event.key, 'received_at', p_event.received_at);
$$;

--
-- Name: feed_followed(); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.feed_followed() RETURNS boolean
    LANGUAGE sql
    AS $$
  select case when pg_try_advisory_lock(7415, 0) then not pg_advisory_unlock(7415, 0)
              else true end
$$;

--
-- Name: finish_cleanup(bigint, integer, integer, integer, integer, integer, text); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.finish_cleanup(p_id bigint, p_runs integer, p_outputs integer, p_events integer, p_workers integer, p_ticks integer, p_error text) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  if threadline.caller_kind() not in ('owner', 'conductor') then
    perform threadline.refuse('recording a cleanup');
  end if;
  update threadline.cleanups
     set finished_at = now(), runs_removed = p_runs, outputs_removed = p_outputs,
         events_removed = p_events, workers_removed = p_workers, ticks_removed = p_ticks,
         error = p_error
   where id = p_id and finished_at is null;
  if not found then
    perform threadline.refuse(format('finishing cleanup %s again', p_id));
  end if;
end;
$$;

--
-- Name: fold_run_counts(); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.fold_run_counts() RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_deleted integer;
  v_sums jsonb;
  v_kept integer;
begin
  -- The rows deleted are exactly the rows summed: a writer adding to one of them meanwhile waits
  -- for this transaction, then finds it gone and adds a row of its own.
  with folded as (
    delete from threadline.run_counts
     where day < threadline.run_day(now())
    returning day, workflow, state, step, runs
  )
  select (select count(*) from folded),
         (select jsonb_agg(s) from (select day, workflow, state, step, sum(runs)::integer as runs
                                      from folded group by 1, 2, 3, 4) s)
    into v_deleted, v_sums;
  insert into threadline.run_counts as c (day, workflow, state, step, shard, runs)
  select day, workflow, state, step, 0, runs
    from jsonb_to_recordset(coalesce(v_sums, '[]'::jsonb))
         as x (day timestamptz, workflow text, state text, step text, runs integer)
   where runs <> 0
  on conflict (day, workflow, state, step, shard) do update set runs = c.runs + excluded.runs;
  get diagnostics v_kept = row_count;
  return v_deleted - v_kept;
end;
$$;

--
-- Name: follow_feed(); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.follow_feed() RETURNS void
    LANGUAGE sql
    AS $$
  select pg_advisory_lock_shared(7415, 0)
$$;

--
-- Name: step_claims; Type: TABLE; Schema: threadline; Owner: -
--

CREATE TABLE threadline.step_claims (
    step_key text NOT NULL,
    attempt integer NOT NULL,
    run_id uuid NOT NULL,
    worker_id text NOT NULL,
    host text NOT NULL,
    pgid integer,
    lease_until timestamp with time zone NOT NULL,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    finished_at timestamp with time zone,
    outcome text,
    retry_at timestamp with time zone,
    secret_hash bytea,
    reported_xact xid8,
    CONSTRAINT step_claims_outcome_check CHECK ((outcome = ANY (ARRAY['completed'::text, 'failed'::text, 'lost'::text, 'cancelled'::text])))
);

--
-- Name: held_claim(text, integer, text); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.held_claim(p_step_key text, p_attempt integer, p_secret text) RETURNS threadline.step_claims
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_claim threadline.step_claims;
begin
  select * into v_claim from threadline.step_claims
   where step_key = p_step_key and attempt = p_attempt for update;
  if not found or v_claim.secret_hash is distinct from threadline.claim_secret_hash(p_secret) then
    perform threadline.refuse(format('acting for attempt %s of step %s', p_attempt, p_step_key));
  end if;
  return v_claim;
end;
$$;

--
-- Name: proposals; Type: TABLE; Schema: threadline; Owner: -
--

CREATE TABLE threadline.proposals (
    id bigint NOT NULL,
    workflow text NOT NULL,
    base_hash text NOT NULL,
    proposed jsonb NOT NULL,
    proposed_hash text NOT NULL,
    summary text NOT NULL,
    diff text NOT NULL,
    risk text NOT NULL,
    risk_reasons text[] DEFAULT '{}'::text[] NOT NULL,
    status text DEFAULT 'open'::text NOT NULL,
    proposed_by text NOT NULL,
    proposed_via text NOT NULL,
    run_id uuid,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone DEFAULT (now() + '14 days'::interval) NOT NULL,
    reviewed_by text,
    review_note text,
    reviewed_at timestamp with time zone,
    applied_version integer,
    applied_at timestamp with time zone,
    proposed_text text,
    CONSTRAINT proposals_risk_check CHECK ((risk = ANY (ARRAY['low'::text, 'medium'::text, 'high'::text]))),
    CONSTRAINT proposals_status_check CHECK ((status = ANY (ARRAY['open'::text, 'approved'::text, 'rejected'::text, 'applied'::text, 'stale'::text, 'expired'::text])))
);

--
-- Name: insert_proposal(jsonb); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.insert_proposal(p_row jsonb) RETURNS SETOF threadline.proposals
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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

--
-- Name: issue_resume_token(text, uuid, text, text, text, double precision); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.issue_resume_token(p_token_hash text, p_run_id uuid, p_gate_key text, p_subject text, p_via text, p_ttl_s double precision) RETURNS timestamp with time zone
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_expires timestamptz;
begin
  if threadline.caller_kind() = 'conductor' then
    if not exists (select 1 from threadline.notifications n
                    where n.run_id = p_run_id and n.event_key = p_gate_key
                      and n.subject = p_subject) then
      perform threadline.refuse(format('issuing a resume link as %s for %s', p_subject,
                                       p_gate_key));
    end if;
  elsif threadline.caller_kind() <> 'owner' then
    perform threadline.refuse('issuing a resume link');
  end if;
  if p_ttl_s is null or p_ttl_s <= 0 or p_ttl_s > 7 * 86400 then
    raise exception 'ttl_s must be within (0, 604800] seconds, not %', p_ttl_s
      using errcode = '22023';
  end if;
  insert into threadline.resume_tokens (token_hash, run_id, gate_key, subject, issued_via,
                                        expires_at)
  values (p_token_hash, p_run_id, p_gate_key, p_subject, p_via,
          now() + make_interval(secs => p_ttl_s))
  returning expires_at into v_expires;
  return v_expires;
end;
$$;

--
-- Name: keep_journal(); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.keep_journal() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  update threadline.run_journal
     set state = new.state, status = new.status, written_at = new.updated_at
   where run_id = new.task_id and name = new.checkpoint_name;
  if not found then
    insert into threadline.run_journal (run_id, name, state, status, written_at)
    values (new.task_id, new.checkpoint_name, new.state, new.status, new.updated_at);
  end if;
  return null;
end;
$$;

--
-- Name: link_account_is_the_subjects(); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.link_account_is_the_subjects() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  if threadline.caller_kind() = 'hooks'
     and (new.minted_by is not null
          or (new.account_id is not null
              and new.account_id is distinct from (select a.id from threadline.accounts a
                                                    where a.name = new.actor
                                                      and a.removed_at is null))) then
    perform threadline.refuse(format('recording a decision by link for another account than %s''s',
                                     new.actor));
  end if;
  return new;
end;
$$;

--
-- Name: link_decision_audited(); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.link_decision_audited() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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

--
-- Name: lock_admission(text); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.lock_admission(p_workflow text) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  if exists (select 1 from threadline.run_limits) then
    perform pg_advisory_xact_lock(7413, 0);
  end if;
  perform pg_advisory_xact_lock(7412, hashtext(p_workflow));
end;
$$;

--
-- Name: lock_event(text, text); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.lock_event(p_name text, p_key text) RETURNS void
    LANGUAGE sql
    AS $$
  select pg_advisory_xact_lock(7412, hashtext(p_name || chr(31) || coalesce(p_key, '')));
$$;

--
-- Name: lock_proposal(bigint); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.lock_proposal(p_id bigint) RETURNS TABLE(proposal threadline.proposals, expired boolean)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  perform threadline.require_caller(array['console'], 'locking a proposal');
  perform threadline.console_actor(array['review_proposal', 'apply_proposal'],
                                   'locking a proposal');
  return query select p, p.expires_at <= now() from threadline.proposals p where p.id = p_id
                  for update;
end;
$$;

--
-- Name: run_threads; Type: TABLE; Schema: threadline; Owner: -
--

CREATE TABLE threadline.run_threads (
    run_id uuid NOT NULL,
    workflow text NOT NULL,
    workflow_version integer NOT NULL,
    recipe_hash text NOT NULL,
    recipe jsonb NOT NULL,
    payload jsonb NOT NULL,
    bot text NOT NULL,
    trigger jsonb NOT NULL,
    idempotency_key text,
    state text DEFAULT 'pending'::text NOT NULL,
    current_step text,
    current_try integer,
    await_key text,
    await_kind text,
    awaiting boolean DEFAULT false NOT NULL,
    last_emitted_key text,
    next_seq integer DEFAULT 1 NOT NULL,
    wake_at timestamp with time zone,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    finished_at timestamp with time zone,
    admitted_at timestamp with time zone DEFAULT now(),
    queue_seq bigint,
    parent_run_id uuid,
    parent jsonb,
    outputs jsonb,
    agent jsonb,
    initiator text,
    CONSTRAINT run_threads_await_kind_check CHECK ((await_kind = ANY (ARRAY['bot'::text, 'gate'::text, 'event'::text]))),
    CONSTRAINT run_threads_state_check CHECK ((state = ANY (ARRAY['pending'::text, 'queued'::text, 'running'::text, 'sleeping'::text, 'waiting'::text, 'completed'::text, 'failed'::text, 'cancelled'::text])))
)
WITH (fillfactor='80');

--
-- Name: lock_run(uuid); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.lock_run(p_run_id uuid) RETURNS SETOF threadline.run_threads
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_caller text := threadline.caller_kind();
begin
  perform threadline.console_actor(null, 'locking a run');
  if v_caller = 'hooks' then
    if not exists (select 1 from threadline.resume_tokens
                    where run_id = p_run_id and used_xact = pg_current_xact_id_if_assigned()) then
      perform threadline.refuse(format('locking run %s without its resume token', p_run_id));
    end if;
  elsif v_caller not in ('owner', 'conductor', 'console') then
    perform threadline.refuse('locking a run');
  end if;
  return query select * from threadline.run_threads where run_id = p_run_id for no key update;
end;
$$;

--
-- Name: lock_scheduled_workflow(text); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.lock_scheduled_workflow(p_slug text) RETURNS TABLE(slug text, schedule text, timezone text, schedule_enabled_at timestamp with time zone, catch_up text)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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

--
-- Name: workflows; Type: TABLE; Schema: threadline; Owner: -
--

CREATE TABLE threadline.workflows (
    slug text NOT NULL,
    name text NOT NULL,
    description text,
    bot text NOT NULL,
    recipe jsonb NOT NULL,
    schedule text,
    timezone text DEFAULT 'UTC'::text NOT NULL,
    enabled boolean DEFAULT true NOT NULL,
    version integer NOT NULL,
    hash text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    schedule_enabled_at timestamp with time zone
);

--
-- Name: lock_workflow(text); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.lock_workflow(p_slug text) RETURNS SETOF threadline.workflows
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  perform threadline.require_caller(array['console'], 'locking a workflow');
  perform threadline.workflow_actor('locking a workflow');
  return query select * from threadline.workflows w where w.slug = p_slug for update;
end;
$$;

--
-- Name: mint_api_token(jsonb); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.mint_api_token(p_row jsonb) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  if threadline.caller_kind() = 'console' and (p_row ->> 'minted_by') is distinct from
       (threadline.console_actor(array['mint_token'], 'minting an API token') ->> 'account_id') then
    perform threadline.refuse('minting an API token as another account');
  end if;
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

--
-- Name: name_of_label(text); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.name_of_label(p_label text) RETURNS text
    LANGUAGE sql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
  select regexp_replace(p_label, '( for |, via a token minted by ).*$', '')
$_$;

--
-- Name: notification_done(bigint, boolean, boolean, double precision, text); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.notification_done(p_id bigint, p_sent boolean, p_give_up boolean, p_backoff_s double precision, p_error text) RETURNS TABLE(id bigint)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
#variable_conflict use_column
begin
  if threadline.caller_kind() not in ('owner', 'conductor') then
    perform threadline.refuse('sending notifications');
  end if;
  return query
  update threadline.notifications n
     set status = case when p_sent then 'sent' when p_give_up then 'failed' else 'pending' end,
         sent_at = case when p_sent then now() end,
         next_at = case when p_sent then n.next_at
                        else now() + make_interval(secs => p_backoff_s) end,
         last_error = case when p_sent then null else p_error end
   where n.id = p_id and n.status = 'pending'
  returning n.id;
end;
$$;

--
-- Name: open_console_session(text, text, text, text, integer); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.open_console_session(p_session text, p_via text, p_account text, p_secret text, p_days integer) RETURNS TABLE(account text, roles text[])
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
declare
  v_account text;
  v_roles text[];
  v_expires timestamptz;
  v_used timestamptz;
  v_verifier text;
begin
  perform threadline.require_caller(array['console'], 'opening a console session');
  if length(coalesce(p_session, '')) < 32 then
    raise exception 'a session id needs at least 32 characters' using errcode = '22023';
  end if;
  if p_days is null or p_days not between 1 and 30 then
    raise exception 'a session lasts 1 to 30 days, not %', p_days using errcode = '22023';
  end if;
  if p_via = 'token' then
    select l.account, l.roles, l.expires_at, l.used_at into v_account, v_roles, v_expires, v_used
      from threadline.console_links l
     where l.token_hash = threadline.sha256_hex(coalesce(p_secret, ''))
       for update;
    if v_account is null or v_used is not null or v_expires <= now() then
      raise exception 'this sign-in link is unknown, used up or expired'
        using errcode = 'invalid_password';
    end if;
    if p_account is not null and p_account <> v_account then
      raise exception 'this sign-in link signs in %, not %', v_account, p_account
        using errcode = 'invalid_password';
    end if;
    update threadline.console_links l set used_at = now()
     where l.token_hash = threadline.sha256_hex(p_secret);
  elsif p_via = 'password' then
    select p.verifier, p.roles into v_verifier, v_roles
      from threadline.console_passwords p where p.account = p_account;
    -- An unknown name costs a check too, so the time taken tells no name apart.
    if not threadline.password_matches(coalesce(p_secret, ''), coalesce(v_verifier,
         'pbkdf2-sha256$100000$AAAAAAAAAAAAAAAAAAAAAA==$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA='))
       or v_verifier is null then
      raise exception 'invalid user name or password' using errcode = 'invalid_password';
    end if;
    v_account := p_account;
  elsif p_via = 'no-auth' then
    select n.account into v_account from threadline.console_no_auth n;
    if v_account is null then
      raise exception 'sign-in is on: only the install''s owner turns it off (threadline up --no-auth)'
        using errcode = 'insufficient_privilege';
    end if;
    if p_account is not null and p_account <> v_account then
      raise exception 'sign-in is off only for %, not %', v_account, p_account
        using errcode = 'insufficient_privilege';
    end if;
    v_roles := array['approver', 'operator', 'viewer'];
  else
    raise exception 'via: %; a session opens by token, password or no-auth', p_via
      using errcode = '22023';
  end if;
  -- A removed account signs in no more: an admin adds it again.
  if exists (select 1 from threadline.accounts a where a.name = v_account)
     and not exists (select 1 from threadline.accounts a
                      where a.name = v_account and a.removed_at is null) then
    raise exception 'the account % was removed: an admin adds it again (threadline user add %)',
      v_account, v_account using errcode = 'insufficient_privilege';
  end if;
  delete from threadline.console_sessions s where s.expires_at < now() - interval '1 day';
  delete from threadline.console_links l where l.expires_at < now() - interval '1 day';
  -- The account of a name signing in is made on its first use (accounts.ensure).
  if v_account ~ '^[A-Za-z0-9_.@-]{1,100}$' then
    insert into threadline.accounts (name, created_by) values (v_account, 'console sign-in')
    on conflict do nothing;
  end if;
  insert into threadline.console_sessions (session_hash, account, roles, via, expires_at)
  values (threadline.sha256_hex(p_session), v_account, v_roles, p_via,
          now() + make_interval(days => p_days));
  return query select v_account, v_roles;
end;
$_$;

--
-- Name: own_worker(text); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.own_worker(p_id text) RETURNS boolean
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  select threadline.caller_kind() = 'owner' or exists (
    select 1
      from threadline.workers w
      join pg_locks l on l.locktype = 'advisory' and l.classid = 7411 and l.objid = w.lock_key
                     and l.objsubid = 2 and l.granted and l.mode = 'ExclusiveLock'
     where w.id = p_id and w.kind = threadline.caller_kind() and l.pid = pg_backend_pid())
$$;

--
-- Name: password_matches(text, text); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.password_matches(p_password text, p_verifier text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE STRICT
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
declare
  v_parts text[] := string_to_array(p_verifier, '$');
begin
  if cardinality(v_parts) <> 4 or v_parts[1] <> 'pbkdf2-sha256' or v_parts[2] !~ '^[0-9]{1,8}$'
  then
    return false;
  end if;
  return threadline.pbkdf2_sha256(p_password, decode(v_parts[3], 'base64'), v_parts[2]::integer)
         = decode(v_parts[4], 'base64');
end;
$_$;

--
-- Name: password_verifier(text, integer); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.password_verifier(p_password text, p_iterations integer DEFAULT 100000) RETURNS text
    LANGUAGE plpgsql STRICT
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
declare
  -- gen_random_uuid draws from the server's strong random source (122 random bits each).
  v_salt bytea := substring(sha256(uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid()))
                            from 1 for 16);
begin
  if p_password = '' then
    raise exception 'password: empty' using errcode = '22023';
  end if;
  return format('pbkdf2-sha256$%s$%s$%s', p_iterations, encode(v_salt, 'base64'),
                encode(threadline.pbkdf2_sha256(p_password, v_salt, p_iterations), 'base64'));
end;
$_$;

--
-- Name: pbkdf2_sha256(text, bytea, integer); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.pbkdf2_sha256(p_password text, p_salt bytea, p_iterations integer) RETURNS bytea
    LANGUAGE plpgsql IMMUTABLE STRICT
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_key bytea := convert_to(p_password, 'UTF8');
  v_ikey bytea;
  v_okey bytea;
  v_u bytea;
  v_acc bit(256);
begin
  if p_iterations not between 1 and 10000000 then
    raise exception 'pbkdf2: % iterations is out of range', p_iterations using errcode = '22023';
  end if;
  if length(v_key) > 64 then
    v_key := sha256(v_key);
  end if;
  v_key := v_key || decode(repeat('00', 64 - length(v_key)), 'hex');
  v_ikey := v_key;
  v_okey := v_key;
  for i in 0 .. 63 loop
    v_ikey := set_byte(v_ikey, i, get_byte(v_key, i) # 54);  -- 0x36
    v_okey := set_byte(v_okey, i, get_byte(v_key, i) # 92);  -- 0x5c
  end loop;
  v_u := sha256(v_okey || sha256(v_ikey || p_salt || '\x00000001'::bytea));
  v_acc := ('x' || encode(v_u, 'hex'))::bit(256);
  for i in 2 .. p_iterations loop
    v_u := sha256(v_okey || sha256(v_ikey || v_u));
    v_acc := v_acc # ('x' || encode(v_u, 'hex'))::bit(256);
  end loop;
  return decode((select string_agg(lpad(to_hex(substring(v_acc from 64 * k + 1 for 64)::bit(64)
                                                 ::bigint), 16, '0'), '' order by k)
                   from generate_series(0, 3) k), 'hex');
end;
$$;

--
-- Name: proposal_applied(bigint, integer); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.proposal_applied(p_id bigint, p_version integer) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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

--
-- Name: prune_dead_workers(); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.prune_dead_workers() RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_count integer;
begin
  delete from threadline.workers w
   where w.last_beat_at < now() - interval '1 day'
     and not exists (select 1 from threadline.live_workers l where l.id = w.id);
  get diagnostics v_count = row_count;
  return v_count;
end;
$$;

--
-- Name: prune_schedule_ticks(jsonb, integer); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.prune_schedule_ticks(p_runs jsonb, p_limit integer) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_count integer;
begin
  delete from threadline.schedule_ticks t
   where (t.workflow, t.slot) in (
     select p.workflow, p.slot from threadline.schedule_ticks_past_retention(p_runs) p
      limit p_limit);
  get diagnostics v_count = row_count;
  return v_count;
end;
$$;

--
-- Name: queue_run(uuid, text); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.queue_run(p_run_id uuid, p_workflow text) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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

--
-- Name: record_decision(jsonb); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.record_decision(p_row jsonb) RETURNS timestamp with time zone
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_caller text := threadline.caller_kind();
  v_token threadline.resume_tokens;
  v_at timestamptz;
begin
  perform threadline.check_console_decision(p_row);
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

--
-- Name: record_webhook_delivery(text, text, text, uuid, text); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.record_webhook_delivery(p_path text, p_delivery text, p_signature text, p_run_id uuid, p_caller text) RETURNS uuid
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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

--
-- Name: refuse(text); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.refuse(p_what text) RETURNS void
    LANGUAGE plpgsql
    AS $$
begin
  raise exception '% is not allowed for % processes', p_what, threadline.caller_kind()
    using errcode = 'insufficient_privilege';
end;
$$;

--
-- Name: refuse_person(text, text, text); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.refuse_person(p_who text, p_verb text, p_reason text) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  raise exception '% may not %: %', p_who, p_verb, p_reason using errcode = 'insufficient_privilege';
end;
$$;

--
-- Name: register_wait(text, uuid, text, text[], text); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.register_wait(p_queue text, p_run_id uuid, p_step_key text, p_names text[], p_key text) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_name text;
  v_since timestamptz;
  v_event threadline.outside_events;
begin
  perform threadline.require_caller(array['conductor'], 'registering a wait');
  for v_name in select distinct n from unnest(p_names) n order by 1 loop
    perform threadline.lock_event(v_name, p_key);
  end loop;
  select created_at into v_since from threadline.run_threads where run_id = p_run_id;
  insert into threadline.event_waits (step_key, run_id, names, key, since)
  values (p_step_key, p_run_id, p_names, p_key, v_since)
  on conflict (step_key) do nothing;
  if not found then
    return false;  -- a replay: registered (and perhaps released) already
  end if;
  select * into v_event from threadline.outside_events
   where name = any (p_names) and key is not distinct from p_key and received_at >= v_since
   order by id limit 1;
  if v_event.id is not null then
    return threadline.release_wait(p_queue, p_step_key, threadline.event_result(v_event));
  end if;
  return false;
end;
$$;

--
-- Name: register_worker(text, text, text, integer, text, text); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.register_worker(p_id text, p_kind text, p_host text, p_pid integer, p_version text, p_sandbox text) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_caller text := threadline.caller_kind();
  v_key integer;
begin
  if v_caller not in ('owner', p_kind) then
    perform threadline.refuse(format('registering a %s process', p_kind));
  end if;
  insert into threadline.workers (id, kind, host, pid, lock_key, version, sandbox)
  values (p_id, p_kind, p_host, p_pid, nextval('threadline.worker_lock_keys'), p_version,
          p_sandbox)
  returning lock_key into v_key;
  perform pg_advisory_lock(7411, v_key);
  return v_key;
end;
$$;

--
-- Name: release_wait(text, text, jsonb); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.release_wait(p_queue text, p_step_key text, p_payload jsonb) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_run uuid;
begin
  perform threadline.require_caller(array['conductor', 'console', 'hooks'], 'ending a wait');
  delete from threadline.event_waits where step_key = p_step_key returning run_id into v_run;
  if v_run is null then
    return false;
  end if;
  perform absurd.emit_event(p_queue, 'threadline.step.done:' || p_step_key, p_payload);
  update threadline.run_threads
     set awaiting = false, last_emitted_key = p_step_key, updated_at = now()
   where run_id = v_run and await_key = p_step_key and awaiting;
  perform threadline.wake('threadline', 'step.done:' || v_run);
  return true;
end;
$$;

--
-- Name: remove_console_password(text); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.remove_console_password(p_account text) RETURNS boolean
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  update threadline.console_sessions s set closed_at = now()
   where s.account = p_account and s.via = 'password' and s.closed_at is null;
  delete from threadline.console_passwords p where p.account = p_account;
  return found;
end;
$$;

--
-- Name: renew_claim(text, integer, text, double precision, integer); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.renew_claim(p_step_key text, p_attempt integer, p_secret text, p_lease_s double precision, p_pgid integer) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_claim threadline.step_claims := threadline.held_claim(p_step_key, p_attempt, p_secret);
begin
  if p_lease_s is null or p_lease_s <= 0 or p_lease_s > 3600 then
    raise exception 'lease_s must be within (0, 3600] seconds, not %', p_lease_s
      using errcode = '22023';
  end if;
  if v_claim.finished_at is not null then
    return null;
  end if;
  update threadline.step_claims
     set lease_until = now() + make_interval(secs => p_lease_s),
         pgid = coalesce(p_pgid, pgid)
   where step_key = p_step_key and attempt = p_attempt;
  return (select rt.state = 'running' and rt.await_key = p_step_key and rt.awaiting
            from threadline.run_threads rt where rt.run_id = v_claim.run_id);
end;
$$;

--
-- Name: report_step(text, uuid, text, integer, text, text, text, double precision, text, text, text, text, jsonb, integer); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.report_step(p_queue text, p_run_id uuid, p_step_key text, p_attempt integer, p_secret text, p_bot text, p_outcome text, p_backoff_s double precision, p_note text, p_message text, p_terminal_kind text, p_terminal_text text, p_payload jsonb, p_exit_code integer) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_claim threadline.step_claims;
  v_run record;
  v_entry_data jsonb := jsonb_build_object('attempt', p_attempt, 'exit_code', p_exit_code);
begin
  if threadline.caller_kind() not in ('owner', 'bots') then
    perform threadline.refuse('reporting a step');
  end if;
  if p_outcome is null or p_outcome not in ('completed', 'failed') then
    raise exception 'outcome must be completed or failed, not %', p_outcome using errcode = '22023';
  end if;
  if p_terminal_kind is distinct from 'signal.dispatch.' || p_outcome then
    raise exception 'terminal_kind must be signal.dispatch.%, not %', p_outcome, p_terminal_kind
      using errcode = '22023';
  end if;
  v_claim := threadline.held_claim(p_step_key, p_attempt, p_secret);
  if v_claim.run_id is distinct from p_run_id then
    perform threadline.refuse(format('reporting step %s of run %s', p_step_key, p_run_id));
  end if;
  if v_claim.finished_at is not null or exists (
       select 1 from threadline.step_claims n
        where n.step_key = p_step_key and n.attempt > p_attempt) then
    return 'dropped';
  end if;
  select state, await_key, awaiting into v_run
    from threadline.run_threads where run_id = p_run_id for no key update;
  if not found or not (v_run.state = 'running' and v_run.await_key = p_step_key
                       and v_run.awaiting) then
    update threadline.step_claims set finished_at = now(), outcome = 'cancelled'
     where step_key = p_step_key and attempt = p_attempt;
    return 'cancelled';
  end if;
  update threadline.step_claims
     set finished_at = now(), outcome = p_outcome,
         retry_at = now() + make_interval(secs => p_backoff_s),
         reported_xact = pg_current_xact_id()
   where step_key = p_step_key and attempt = p_attempt;
  if p_backoff_s is not null then
    perform threadline.append_entry(p_run_id, 'bot', p_bot, 'progress', p_step_key, null,
                                    p_note, v_entry_data);
    return 'retry';
  end if;
  if p_message is not null then
    perform threadline.append_entry(p_run_id, 'bot', p_bot, 'message', p_step_key, null,
                                    p_message, v_entry_data);
  end if;
  perform threadline.append_entry(p_run_id, 'bot', p_bot, p_terminal_kind, p_step_key,
                                  'terminal:' || p_step_key, p_terminal_text, p_payload);
  perform threadline.emit_step_done(p_queue, p_run_id, p_step_key, p_payload);
  return 'done';
end;
$$;

--
-- Name: require_caller(text[], text); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.require_caller(p_kinds text[], p_what text) RETURNS void
    LANGUAGE plpgsql
    AS $$
begin
  if threadline.caller_kind() <> all (array_append(p_kinds, 'owner')) then
    perform threadline.refuse(p_what);
  end if;
end;
$$;

--
-- Name: resume_token_subject_account(); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.resume_token_subject_account() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  new.subject_account := (select a.id from threadline.accounts a
                           where a.name = new.subject and a.removed_at is null);
  return new;
end;
$$;

--
-- Name: retake_run_agent(uuid); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.retake_run_agent(p_run_id uuid) RETURNS TABLE(bot text, before jsonb, after jsonb)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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

--
-- Name: retry_run_task(text, uuid); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.retry_run_task(p_queue text, p_run_id uuid) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  perform threadline.require_caller(array['console'], 'retrying a run in the engine');
  perform threadline.console_actor(array['retry'], 'retrying a run in the engine');
  perform absurd.retry_task(p_queue, p_run_id, '{}'::jsonb);
end;
$$;

--
-- Name: review_proposal(bigint, text, text, text); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.review_proposal(p_id bigint, p_status text, p_actor text, p_note text) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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

--
-- Name: run_day(timestamp with time zone); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.run_day(p_at timestamp with time zone) RETURNS timestamp with time zone
    LANGUAGE sql IMMUTABLE
    AS $$
  select date_bin('1 day', p_at, timestamptz '2000-01-01 00:00+00')
$$;

--
-- Name: run_finished_admit(); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.run_finished_admit() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
begin
  perform threadline.admit_queued(tg_argv[0], new.workflow);
  return null;
end;
$$;

--
-- Name: run_search_text(uuid, jsonb); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.run_search_text(p_run_id uuid, p_payload jsonb) RETURNS text
    LANGUAGE sql IMMUTABLE
    AS $$
  select p_run_id::text || ' ' || p_payload::text
$$;

--
-- Name: run_workflow_exists(); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.run_workflow_exists() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  perform 1 from threadline.workflows w where w.slug = new.workflow for key share;
  if not found then
    raise exception 'run %: workflow "%" does not exist', new.run_id, new.workflow
      using errcode = 'foreign_key_violation', table = 'run_threads',
            constraint = 'run_threads_workflow_fkey';
  end if;
  return new;
end;
$$;

--
-- Name: runs_below(uuid); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.runs_below(p_run_id uuid) RETURNS TABLE(run_id uuid, from_step text)
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  -- Each run the given one started, and theirs, with the path of the given run's step it comes
  -- from.
  with recursive below as (
    select r.run_id, r.parent ->> 'step' as from_step
      from threadline.run_threads r
     where r.parent_run_id = p_run_id
    union all
    select r.run_id, b.from_step
      from threadline.run_threads r join below b on r.parent_run_id = b.run_id
  )
  select below.run_id, below.from_step from below
$$;

--
-- Name: runs_leave_no_entries(); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.runs_leave_no_entries() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_run uuid;
begin
  select e.run_id into v_run
    from gone g join threadline.thread_entries e on e.run_id = g.run_id limit 1;
  if v_run is not null then
    raise exception 'run % still has thread entries: delete them before the run', v_run
      using errcode = 'foreign_key_violation';
  end if;
  return null;
end;
$$;

--
-- Name: schedule_ticks_past_retention(jsonb); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.schedule_ticks_past_retention(p_runs jsonb) RETURNS TABLE(workflow text, slot timestamp with time zone)
    LANGUAGE sql STABLE
    AS $$
  select s.workflow, s.slot
    from threadline.schedule_ticks s
   where s.slot < now() - make_interval(secs => (p_runs ->> s.workflow)::float8)
     and s.slot < (select max(m.slot) from threadline.schedule_ticks m
                    where m.workflow = s.workflow)
$$;

--
-- Name: send_entry(uuid, text, text, text, jsonb, text, text, integer, text, text, text); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.send_entry(p_run_id uuid, p_kind text, p_text text, p_step_key text, p_data jsonb, p_state text, p_step text, p_try integer, p_await_kind text, p_channel text, p_wake text, OUT seq integer, OUT queued boolean) RETURNS record
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  seq := threadline.append_entry(p_run_id, 'system', 'threadline', p_kind, p_step_key,
                                 p_kind || ':' || p_step_key, p_text, p_data);
  if seq is not null then
    perform threadline.set_run_state(p_run_id, p_state, p_step, p_try, p_step_key, p_await_kind,
                                     null);
  end if;
  queued := p_await_kind is not distinct from 'bot' and threadline.bot_step_waiting(p_run_id);
  if p_channel is not null and not queued then
    perform threadline.wake(p_channel, p_wake);
  end if;
end;
$$;

--
-- Name: send_wakes(text[], text[]); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.send_wakes(p_channels text[], p_payloads text[]) RETURNS void
    LANGUAGE plpgsql
    AS $$
begin
  perform set_config('synchronous_commit', 'off', true);  -- holds the notify lock for no flush
  perform pg_notify(w.channel, w.payload)
     from unnest(p_channels, p_payloads) as w (channel, payload);
end;
$$;

--
-- Name: set_claim_pgid(text, integer, text, integer); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.set_claim_pgid(p_step_key text, p_attempt integer, p_secret text, p_pgid integer) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  perform threadline.held_claim(p_step_key, p_attempt, p_secret);
  update threadline.step_claims set pgid = p_pgid
   where step_key = p_step_key and attempt = p_attempt and finished_at is null;
end;
$$;

--
-- Name: set_console_password(text, text, text[], text); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.set_console_password(p_account text, p_password text, p_roles text[], p_set_by text) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  if coalesce(p_password, '') = '' then
    raise exception 'password: empty' using errcode = '22023';
  end if;
  insert into threadline.console_passwords (account, verifier, roles, set_by)
  values (p_account, threadline.password_verifier(p_password),
          array(select distinct r from unnest(p_roles) r order by 1), p_set_by)
  on conflict (account) do update
    set verifier = excluded.verifier, roles = excluded.roles, set_by = excluded.set_by,
        set_at = now();
  update threadline.console_sessions s set closed_at = now()
   where s.account = p_account and s.via = 'password' and s.closed_at is null;
end;
$$;

--
-- Name: set_proposal_status(bigint, text); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.set_proposal_status(p_id bigint, p_status text) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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

--
-- Name: set_run_outputs(uuid, jsonb); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.set_run_outputs(p_run_id uuid, p_outputs jsonb) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  perform threadline.require_caller(array['conductor'], 'setting a run''s outputs');
  update threadline.run_threads set outputs = p_outputs
   where run_id = p_run_id and state not in ('completed', 'cancelled');
end;
$$;

--
-- Name: set_run_state(uuid, text, text, integer, text, text, timestamp with time zone); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.set_run_state(p_run_id uuid, p_state text, p_step text, p_try integer, p_await_key text, p_await_kind text, p_wake_at timestamp with time zone) RETURNS uuid
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_caller text := threadline.caller_kind();
  v_old text;
  v_task text;
  v_what text := format('moving run %s to %s', p_run_id, p_state);
begin
  perform threadline.require_caller(array['conductor', 'console'], 'setting a run''s state');
  select r.state into v_old from threadline.run_threads r where r.run_id = p_run_id for no key update;
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

--
-- Name: set_schedule_slot_run(text, timestamp with time zone, uuid); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.set_schedule_slot_run(p_workflow text, p_slot timestamp with time zone, p_run_id uuid) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  if threadline.caller_kind() not in ('owner', 'conductor') then
    perform threadline.refuse('recording a schedule''s run');
  end if;
  if not exists (select 1 from threadline.run_threads r
                  where r.run_id = p_run_id and r.workflow = p_workflow
                    and r.trigger ->> 'kind' = 'schedule') then
    perform threadline.refuse(format('recording run %s as a slot of %s', p_run_id, p_workflow));
  end if;
  update threadline.schedule_ticks set run_id = p_run_id
   where workflow = p_workflow and slot = p_slot and run_id is null;
end;
$$;

--
-- Name: set_workflow_enabled(text, boolean); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.set_workflow_enabled(p_slug text, p_enabled boolean) RETURNS TABLE(slug text, enabled boolean)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  perform threadline.require_caller(array['console'], 'enabling or disabling a workflow');
  perform threadline.console_actor(array['enable_workflow'], 'enabling or disabling a workflow');
  return query
    update threadline.workflows w set enabled = p_enabled, updated_at = now()
     where w.slug = p_slug
    returning w.slug, w.enabled;
end;
$$;

--
-- Name: sha256_hex(text); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.sha256_hex(p_secret text) RETURNS text
    LANGUAGE sql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  select encode(sha256(convert_to(p_secret, 'UTF8')), 'hex')
$$;

--
-- Name: spawn_run(text, text, integer, jsonb, text, integer, text, jsonb, jsonb, text, text, text, jsonb, jsonb, jsonb); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.spawn_run(p_queue text, p_task text, p_handler_v integer, p_options jsonb, p_workflow text, p_version integer, p_hash text, p_payload jsonb, p_trigger jsonb, p_idempotency_key text, p_initiator text, p_opening text, p_child jsonb DEFAULT NULL::jsonb, p_snapshot jsonb DEFAULT NULL::jsonb, p_carried jsonb DEFAULT NULL::jsonb) RETURNS TABLE(run_id uuid, created boolean, state text)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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
  if v_caller = 'console' and (p_trigger ->> 'caller') is distinct from
       (threadline.console_actor(array['spawn', 'rerun'], 'starting a run') ->> 'name') then
    perform threadline.refuse('starting a run in the name of ' || (p_trigger ->> 'caller'));
  end if;
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
  -- The run with its opening entry, number 1: the entry written here, not through
  -- append_entry, whose checks every caller that reaches this line has passed.
  insert into threadline.run_threads
    (run_id, workflow, workflow_version, recipe_hash, recipe, payload, bot, trigger,
     idempotency_key, initiator, agent, parent_run_id, parent, next_seq)
  values (v_run, p_workflow, v_version, v_hash, v_recipe, p_payload, v_wf.bot, p_trigger,
          p_idempotency_key, case when p_child is null then p_initiator end, v_agent, v_parent,
          p_child - 'inherited', 2);
  insert into threadline.thread_entries
    (run_id, seq, author_kind, author, kind, step_key, dedupe_key, text, data)
  values (v_run, 1, 'system', 'threadline', 'note', null, 'opened', p_opening,
          jsonb_build_object('trigger', p_trigger, 'payload', p_payload));
  if v_limited then
    perform threadline.queue_run(v_run, p_workflow);
    perform threadline.admit_queued(p_queue, p_workflow);
  end if;
  perform threadline.wake('threadline', 'spawn:' || v_run);
  return query select v_run, true, r.state from threadline.run_threads r where r.run_id = v_run;
end;
$$;

--
-- Name: start_cleanup(text); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.start_cleanup(p_by text) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_id bigint;
begin
  if threadline.caller_kind() = 'conductor' then
    if not exists (select 1 from threadline.live_workers
                    where id = p_by and kind = 'conductor') then
      perform threadline.refuse(format('recording a cleanup by %s', p_by));
    end if;
  elsif threadline.caller_kind() <> 'owner' then
    perform threadline.refuse('recording a cleanup');
  end if;
  insert into threadline.cleanups (by_worker) values (p_by) returning id into v_id;
  return v_id;
end;
$$;

--
-- Name: step_key_free(text); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.step_key_free(p_step_key text) RETURNS boolean
    LANGUAGE sql
    AS $$
  select not exists (
    select 1 from threadline.step_claims c
     where c.step_key = p_step_key
       and (c.outcome = 'completed'
            or c.retry_at > now()
            or (c.finished_at is null and c.lease_until > now()
                and threadline.worker_alive((select w.lock_key from threadline.workers w
                                              where w.id = c.worker_id)))))
$$;

--
-- Name: store_workflow_version(jsonb); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.store_workflow_version(p_row jsonb) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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

--
-- Name: sync_webhook_triggers(); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.sync_webhook_triggers() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
declare
  v_hook jsonb;
  v_index bigint;
  v_owner text;
begin
  delete from threadline.webhook_triggers where workflow = new.slug;
  for v_hook, v_index in
    select value, ordinality - 1
      from jsonb_array_elements(coalesce(new.recipe -> 'webhooks', '[]'::jsonb)) with ordinality
  loop
    insert into threadline.webhook_triggers (path, workflow, secret, map)
    values (v_hook ->> 'path', new.slug, v_hook ->> 'secret', v_hook -> 'map')
    on conflict (path) do nothing;
    if not found then
      select workflow into v_owner from threadline.webhook_triggers where path = v_hook ->> 'path';
      raise exception 'webhooks[%].path: "%" is already used by workflow "%"',
        v_index, v_hook ->> 'path', v_owner
        using errcode = 'unique_violation', constraint = 'webhook_triggers_pkey';
    end if;
  end loop;
  return null;
end;
$$;

--
-- Name: take_schedule_slot(text, timestamp with time zone, integer); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.take_schedule_slot(p_workflow text, p_slot timestamp with time zone, p_skipped integer) RETURNS TABLE(slot timestamp with time zone)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
#variable_conflict use_column
begin
  if threadline.caller_kind() not in ('owner', 'conductor') then
    perform threadline.refuse('taking a schedule slot');
  end if;
  if not exists (select 1 from threadline.workflows w
                  where w.slug = p_workflow and w.enabled and w.schedule is not null) then
    perform threadline.refuse(format('taking a slot of %s, which has no enabled schedule',
                                     p_workflow));
  end if;
  return query
  insert into threadline.schedule_ticks as t (workflow, slot, skipped)
  select p_workflow, p_slot, p_skipped
   where not exists (select 1 from threadline.schedule_ticks k
                      where k.workflow = p_workflow and k.slot >= p_slot)
  on conflict (workflow, slot) do nothing
  returning t.slot;
end;
$$;

--
-- Name: token_used_for(text); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.token_used_for(p_step_key text) RETURNS boolean
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  select (threadline.token_used_here(p_step_key)).token_hash is not null;
$$;

--
-- Name: resume_tokens; Type: TABLE; Schema: threadline; Owner: -
--

CREATE TABLE threadline.resume_tokens (
    token_hash text NOT NULL,
    run_id uuid NOT NULL,
    gate_key text NOT NULL,
    subject text NOT NULL,
    issued_via text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    used_at timestamp with time zone,
    used_xact xid8,
    subject_account bigint
);

--
-- Name: token_used_here(text); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.token_used_here(p_step_key text) RETURNS threadline.resume_tokens
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  select * from threadline.resume_tokens
   where gate_key = p_step_key and used_xact = pg_current_xact_id_if_assigned()
$$;

--
-- Name: track_schedule_enabled(); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.track_schedule_enabled() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
begin
  if new.schedule is null then
    new.schedule_enabled_at := null;
  elsif tg_op = 'INSERT'
     or new.schedule is distinct from old.schedule
     or new.timezone is distinct from old.timezone
     or (new.enabled and not old.enabled) then
    new.schedule_enabled_at := absurd.current_time();
  end if;
  return new;
end;
$$;

--
-- Name: use_resume_token(text, uuid); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.use_resume_token(p_token text, p_run_id uuid) RETURNS TABLE(refusal text, run_id uuid, gate_key text, subject text, expires_at timestamp with time zone, used_at timestamp with time zone)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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
    when p_run_id is not null and v_token.run_id <> p_run_id
         and v_token.run_id not in (select b.run_id from threadline.runs_below(p_run_id) b)
      then 'other run'
    when v_token.used_at is not null then 'used'
    when v_token.expires_at <= now() then 'expired'
    when v_token.subject_account is not null
         and not exists (select 1 from threadline.accounts a
                          where a.id = v_token.subject_account and a.removed_at is null)
      then 'account removed'
  end;
  if v_refusal is null then
    update threadline.resume_tokens t set used_at = now(), used_xact = pg_current_xact_id()
     where t.token_hash = v_token.token_hash;
  end if;
  return query select v_refusal, v_token.run_id, v_token.gate_key, v_token.subject,
                      v_token.expires_at, v_token.used_at;
end;
$$;

--
-- Name: versions_are_immutable(); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.versions_are_immutable() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
begin
  if tg_level = 'STATEMENT' then
    raise exception 'workflow versions are immutable: truncate refused'
      using errcode = 'insufficient_privilege';
  end if;
  raise exception 'workflow versions are immutable: % of version % of workflow % refused',
    lower(tg_op), old.version, old.slug
    using errcode = 'insufficient_privilege',
          hint = 'a change is a new version: threadline recipe apply, or recipe rollback';
end;
$$;

--
-- Name: wake(text, text, text); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.wake(p_channel text, p_payload text, p_holder_host text DEFAULT NULL::text) RETURNS void
    LANGUAGE plpgsql
    AS $$
begin
  if p_channel = 'threadline_changes' and not threadline.feed_followed() then
    return;
  end if;
  if current_setting('threadline.wakes_after_commit', true) = 'on' then
    raise notice using message = p_payload, detail = p_channel, hint = coalesce(p_holder_host, ''),
                       errcode = 'TLW01';
  else
    perform pg_notify(p_channel, p_payload);
  end if;
end;
$$;

--
-- Name: webhook_delivers(text, text); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.webhook_delivers(p_event text, p_event_id text) RETURNS boolean
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  select starts_with(p_event_id, 'webhook:') and exists (
    select 1
      from threadline.webhook_triggers t
      join threadline.workflows w on w.slug = t.workflow
     cross join lateral jsonb_array_elements(w.recipe -> 'webhooks') h
     where t.path = split_part(p_event_id, ':', 2) and w.enabled
       and h ->> 'path' = t.path and h ->> 'event' = p_event)
$$;

--
-- Name: worker_alive(integer); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.worker_alive(p_lock_key integer) RETURNS boolean
    LANGUAGE sql
    AS $$
  select case
           when p_lock_key is null then false  -- no such process (a pruned row)
           when pg_try_advisory_lock_shared(7411, p_lock_key)
             then not pg_advisory_unlock_shared(7411, p_lock_key)
           else true
         end
$$;

--
-- Name: workflow_actor(text); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.workflow_actor(p_what text) RETURNS jsonb
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  select threadline.console_actor(array['apply_recipe', 'rollback', 'apply_proposal'], p_what)
$$;

--
-- Name: workflow_without_runs(); Type: FUNCTION; Schema: threadline; Owner: -
--

CREATE FUNCTION threadline.workflow_without_runs() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  if tg_op = 'UPDATE' and new.slug = old.slug then
    return new;
  end if;
  if exists (select 1 from threadline.run_threads r where r.workflow = old.slug) then
    raise exception 'workflow "%" has runs: it cannot be %', old.slug,
      case tg_op when 'DELETE' then 'deleted' else 'renamed' end
      using errcode = 'foreign_key_violation', table = 'workflows',
            constraint = 'run_threads_workflow_fkey';
  end if;
  return case tg_op when 'DELETE' then old else new end;
end;
$$;

--
-- Name: account_channels; Type: TABLE; Schema: threadline; Owner: -
--

CREATE TABLE threadline.account_channels (
    account_id bigint NOT NULL,
    channel text NOT NULL,
    target text NOT NULL,
    added_by text NOT NULL,
    added_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT account_channels_channel_check CHECK ((channel = ANY (ARRAY['email'::text, 'webhook'::text]))),
    CONSTRAINT account_channels_target_check CHECK (((length(target) >= 1) AND (length(target) <= 2000)))
);

--
-- Name: accounts; Type: TABLE; Schema: threadline; Owner: -
--

CREATE TABLE threadline.accounts (
    id bigint NOT NULL,
    name text NOT NULL,
    created_by text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    removed_by text,
    removed_at timestamp with time zone,
    CONSTRAINT accounts_name_check CHECK ((name ~ '^[A-Za-z0-9_.@-]{1,100}$'::text))
);

--
-- Name: accounts_id_seq; Type: SEQUENCE; Schema: threadline; Owner: -
--

ALTER TABLE threadline.accounts ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME threadline.accounts_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: acting; Type: TABLE; Schema: threadline; Owner: -
--

CREATE UNLOGGED TABLE threadline.acting (
    xact xid8 NOT NULL,
    action text NOT NULL,
    actor jsonb NOT NULL
);

--
-- Name: action_rules; Type: TABLE; Schema: threadline; Owner: -
--

CREATE TABLE threadline.action_rules (
    action text NOT NULL,
    verb text NOT NULL,
    roles text[] NOT NULL,
    admin boolean NOT NULL,
    admin_for_others boolean NOT NULL
);

--
-- Name: api_tokens; Type: TABLE; Schema: threadline; Owner: -
--

CREATE TABLE threadline.api_tokens (
    token_hash text NOT NULL,
    name text NOT NULL,
    roles text[] NOT NULL,
    created_by text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    revoked_at timestamp with time zone,
    last_used_at timestamp with time zone,
    account_id bigint,
    minted_by bigint,
    CONSTRAINT api_tokens_roles_check CHECK (((roles <@ ARRAY['viewer'::text, 'operator'::text, 'approver'::text]) AND (cardinality(roles) > 0)))
);

--
-- Name: authorization_audit; Type: TABLE; Schema: threadline; Owner: -
--

CREATE TABLE threadline.authorization_audit (
    id bigint NOT NULL,
    actor text NOT NULL,
    account_id bigint,
    label text NOT NULL,
    door text NOT NULL,
    action text NOT NULL,
    run_id uuid,
    workflow text,
    detail jsonb,
    outcome text NOT NULL,
    reason text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT authorization_audit_check CHECK (((outcome = 'allowed'::text) OR (reason IS NOT NULL))),
    CONSTRAINT authorization_audit_outcome_check CHECK ((outcome = ANY (ARRAY['allowed'::text, 'refused'::text])))
);

--
-- Name: authorization_audit_id_seq; Type: SEQUENCE; Schema: threadline; Owner: -
--

ALTER TABLE threadline.authorization_audit ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME threadline.authorization_audit_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: bots; Type: TABLE; Schema: threadline; Owner: -
--

CREATE TABLE threadline.bots (
    name text NOT NULL,
    base_url text NOT NULL,
    model text NOT NULL,
    temperature double precision DEFAULT 0 NOT NULL,
    max_tokens integer,
    api_key_env text,
    max_turns integer DEFAULT 20 NOT NULL,
    max_tokens_per_run integer,
    updated_at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: cleanups; Type: TABLE; Schema: threadline; Owner: -
--

CREATE TABLE threadline.cleanups (
    id bigint NOT NULL,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    finished_at timestamp with time zone,
    by_worker text NOT NULL,
    runs_removed integer DEFAULT 0 NOT NULL,
    outputs_removed integer DEFAULT 0 NOT NULL,
    events_removed integer DEFAULT 0 NOT NULL,
    workers_removed integer DEFAULT 0 NOT NULL,
    error text,
    ticks_removed integer DEFAULT 0 NOT NULL
);

--
-- Name: cleanups_id_seq; Type: SEQUENCE; Schema: threadline; Owner: -
--

CREATE SEQUENCE threadline.cleanups_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: cleanups_id_seq; Type: SEQUENCE OWNED BY; Schema: threadline; Owner: -
--

ALTER SEQUENCE threadline.cleanups_id_seq OWNED BY threadline.cleanups.id;

--
-- Name: console_links; Type: TABLE; Schema: threadline; Owner: -
--

CREATE TABLE threadline.console_links (
    token_hash text NOT NULL,
    account text NOT NULL,
    roles text[] NOT NULL,
    minted_by text NOT NULL,
    minted_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    used_at timestamp with time zone,
    CONSTRAINT console_links_account_check CHECK ((account ~ '^[A-Za-z0-9_.@-]{1,100}$'::text)),
    CONSTRAINT console_links_roles_check CHECK ((roles <@ ARRAY['viewer'::text, 'operator'::text, 'approver'::text]))
);

--
-- Name: console_no_auth; Type: TABLE; Schema: threadline; Owner: -
--

CREATE TABLE threadline.console_no_auth (
    only_row boolean DEFAULT true NOT NULL,
    account text NOT NULL,
    set_by text NOT NULL,
    set_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT console_no_auth_only_row_check CHECK (only_row)
);

--
-- Name: console_passwords; Type: TABLE; Schema: threadline; Owner: -
--

CREATE TABLE threadline.console_passwords (
    account text NOT NULL,
    verifier text NOT NULL,
    roles text[] NOT NULL,
    set_by text NOT NULL,
    set_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT console_passwords_account_check CHECK ((account ~ '^[A-Za-z0-9_.@-]{1,100}$'::text)),
    CONSTRAINT console_passwords_roles_check CHECK (((cardinality(roles) > 0) AND (roles <@ ARRAY['viewer'::text, 'operator'::text, 'approver'::text]))),
    CONSTRAINT console_passwords_verifier_check CHECK ((verifier ~ '^pbkdf2-sha256\$[0-9]+\$[A-Za-z0-9+/=]+\$[A-Za-z0-9+/=]+$'::text))
);

--
-- Name: console_sessions; Type: TABLE; Schema: threadline; Owner: -
--

CREATE TABLE threadline.console_sessions (
    session_hash text NOT NULL,
    account text NOT NULL,
    roles text[] NOT NULL,
    via text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    closed_at timestamp with time zone,
    CONSTRAINT console_sessions_via_check CHECK ((via = ANY (ARRAY['token'::text, 'password'::text, 'no-auth'::text])))
);

--
-- Name: decision_audit; Type: TABLE; Schema: threadline; Owner: -
--

CREATE TABLE threadline.decision_audit (
    id bigint NOT NULL,
    run_id uuid,
    gate_key text,
    actor text,
    via text NOT NULL,
    decision text NOT NULL,
    reason text,
    outcome text NOT NULL,
    why text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    account_id bigint,
    minted_by text,
    CONSTRAINT decision_audit_outcome_check CHECK ((outcome = ANY (ARRAY['decided'::text, 'refused'::text])))
);

--
-- Name: decision_audit_id_seq; Type: SEQUENCE; Schema: threadline; Owner: -
--

CREATE SEQUENCE threadline.decision_audit_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: decision_audit_id_seq; Type: SEQUENCE OWNED BY; Schema: threadline; Owner: -
--

ALTER SEQUENCE threadline.decision_audit_id_seq OWNED BY threadline.decision_audit.id;

--
-- Name: decisions; Type: TABLE; Schema: threadline; Owner: -
--

CREATE TABLE threadline.decisions (
    step_key text NOT NULL,
    run_id uuid NOT NULL,
    decision text NOT NULL,
    actor text NOT NULL,
    reason text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    via text DEFAULT 'system'::text NOT NULL,
    on_behalf_of text,
    account_id bigint,
    minted_by text,
    CONSTRAINT decisions_decision_check CHECK ((decision = ANY (ARRAY['approve'::text, 'deny'::text, 'timeout'::text, 'reply'::text]))),
    CONSTRAINT decisions_via_check CHECK ((via = ANY (ARRAY['cli'::text, 'console'::text, 'link'::text, 'api'::text, 'webhook'::text, 'system'::text])))
);

--
-- Name: event_waits; Type: TABLE; Schema: threadline; Owner: -
--

CREATE TABLE threadline.event_waits (
    step_key text NOT NULL,
    run_id uuid NOT NULL,
    names text[] NOT NULL,
    key text,
    since timestamp with time zone NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: workers; Type: TABLE; Schema: threadline; Owner: -
--

CREATE TABLE threadline.workers (
    id text NOT NULL,
    kind text NOT NULL,
    host text NOT NULL,
    pid integer NOT NULL,
    lock_key integer NOT NULL,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    last_beat_at timestamp with time zone DEFAULT now() NOT NULL,
    version text NOT NULL,
    sandbox text,
    stopped_at timestamp with time zone,
    CONSTRAINT workers_kind_check CHECK ((kind = ANY (ARRAY['conductor'::text, 'bots'::text])))
);

--
-- Name: live_workers; Type: VIEW; Schema: threadline; Owner: -
--

CREATE VIEW threadline.live_workers AS
 SELECT id,
    kind,
    host,
    pid,
    lock_key,
    started_at,
    last_beat_at,
    version,
    sandbox
   FROM threadline.workers w
  WHERE threadline.worker_alive(lock_key);

--
-- Name: model_prices; Type: TABLE; Schema: threadline; Owner: -
--

CREATE TABLE threadline.model_prices (
    model text NOT NULL,
    input_per_mtok numeric NOT NULL,
    output_per_mtok numeric NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT model_prices_input_per_mtok_check CHECK ((input_per_mtok >= (0)::numeric)),
    CONSTRAINT model_prices_output_per_mtok_check CHECK ((output_per_mtok >= (0)::numeric))
);

--
-- Name: notifications; Type: TABLE; Schema: threadline; Owner: -
--

CREATE TABLE threadline.notifications (
    id bigint NOT NULL,
    run_id uuid NOT NULL,
    event text NOT NULL,
    event_key text NOT NULL,
    rule integer NOT NULL,
    channel text NOT NULL,
    target text NOT NULL,
    subject text,
    text text NOT NULL,
    status text DEFAULT 'pending'::text NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    next_at timestamp with time zone DEFAULT now() NOT NULL,
    last_error text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    sent_at timestamp with time zone,
    CONSTRAINT notifications_channel_check CHECK ((channel = ANY (ARRAY['webhook'::text, 'email'::text]))),
    CONSTRAINT notifications_event_check CHECK ((event = ANY (ARRAY['gate'::text, 'failed'::text, 'waiting'::text]))),
    CONSTRAINT notifications_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'sent'::text, 'failed'::text])))
);

--
-- Name: notifications_id_seq; Type: SEQUENCE; Schema: threadline; Owner: -
--

CREATE SEQUENCE threadline.notifications_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: notifications_id_seq; Type: SEQUENCE OWNED BY; Schema: threadline; Owner: -
--

ALTER SEQUENCE threadline.notifications_id_seq OWNED BY threadline.notifications.id;

--
-- Name: outside_events_id_seq; Type: SEQUENCE; Schema: threadline; Owner: -
--

CREATE SEQUENCE threadline.outside_events_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: outside_events_id_seq; Type: SEQUENCE OWNED BY; Schema: threadline; Owner: -
--

ALTER SEQUENCE threadline.outside_events_id_seq OWNED BY threadline.outside_events.id;

--
-- Name: pause; Type: TABLE; Schema: threadline; Owner: -
--

CREATE TABLE threadline.pause (
    only_row boolean DEFAULT true NOT NULL,
    reason text,
    paused_by text NOT NULL,
    via text NOT NULL,
    paused_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT pause_only_row_check CHECK (only_row)
);

--
-- Name: proposals_id_seq; Type: SEQUENCE; Schema: threadline; Owner: -
--

CREATE SEQUENCE threadline.proposals_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: proposals_id_seq; Type: SEQUENCE OWNED BY; Schema: threadline; Owner: -
--

ALTER SEQUENCE threadline.proposals_id_seq OWNED BY threadline.proposals.id;

--
-- Name: retention_defaults; Type: TABLE; Schema: threadline; Owner: -
--

CREATE TABLE threadline.retention_defaults (
    only_row boolean DEFAULT true NOT NULL,
    runs_s integer NOT NULL,
    output_s integer NOT NULL,
    set_by text NOT NULL,
    set_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT retention_defaults_check CHECK ((output_s <= runs_s)),
    CONSTRAINT retention_defaults_only_row_check CHECK (only_row),
    CONSTRAINT retention_defaults_output_s_check CHECK ((output_s >= 3600)),
    CONSTRAINT retention_defaults_runs_s_check CHECK ((runs_s >= 3600))
);

--
-- Name: run_counts; Type: TABLE; Schema: threadline; Owner: -
--

CREATE TABLE threadline.run_counts (
    day timestamp with time zone NOT NULL,
    workflow text NOT NULL,
    state text NOT NULL,
    step text DEFAULT ''::text NOT NULL,
    shard smallint NOT NULL,
    runs integer NOT NULL
);

--
-- Name: run_journal; Type: TABLE; Schema: threadline; Owner: -
--

CREATE TABLE threadline.run_journal (
    run_id uuid NOT NULL,
    name text NOT NULL,
    state jsonb,
    status text NOT NULL,
    written_at timestamp with time zone NOT NULL
);

--
-- Name: run_limits; Type: TABLE; Schema: threadline; Owner: -
--

CREATE TABLE threadline.run_limits (
    kind text NOT NULL,
    name text DEFAULT ''::text NOT NULL,
    max_runs integer NOT NULL,
    set_by text NOT NULL,
    set_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT run_limits_check CHECK (((kind = 'global'::text) = (name = ''::text))),
    CONSTRAINT run_limits_kind_check CHECK ((kind = ANY (ARRAY['global'::text, 'initiator'::text]))),
    CONSTRAINT run_limits_max_runs_check CHECK ((max_runs > 0))
);

--
-- Name: run_queue_seq; Type: SEQUENCE; Schema: threadline; Owner: -
--

CREATE SEQUENCE threadline.run_queue_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: schedule_ticks; Type: TABLE; Schema: threadline; Owner: -
--

CREATE TABLE threadline.schedule_ticks (
    workflow text NOT NULL,
    slot timestamp with time zone NOT NULL,
    run_id uuid,
    fired_at timestamp with time zone DEFAULT now() NOT NULL,
    skipped integer DEFAULT 0 NOT NULL
);

--
-- Name: schema_migrations; Type: TABLE; Schema: threadline; Owner: -
--

CREATE TABLE threadline.schema_migrations (
    id bigint NOT NULL,
    name text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: schema_migrations_id_seq; Type: SEQUENCE; Schema: threadline; Owner: -
--

CREATE SEQUENCE threadline.schema_migrations_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: schema_migrations_id_seq; Type: SEQUENCE OWNED BY; Schema: threadline; Owner: -
--

ALTER SEQUENCE threadline.schema_migrations_id_seq OWNED BY threadline.schema_migrations.id;

--
-- Name: thread_entries; Type: TABLE; Schema: threadline; Owner: -
--

CREATE TABLE threadline.thread_entries (
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    author_kind text NOT NULL,
    author text NOT NULL,
    kind text NOT NULL,
    step_key text,
    dedupe_key text,
    text text NOT NULL,
    data jsonb,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT thread_entries_author_kind_check CHECK ((author_kind = ANY (ARRAY['system'::text, 'bot'::text, 'human'::text]))),
    CONSTRAINT thread_entries_kind_check CHECK ((kind = ANY (ARRAY['message'::text, 'instruction'::text, 'question'::text, 'progress'::text, 'signal.dispatch.completed'::text, 'signal.dispatch.failed'::text, 'decision'::text, 'note'::text, 'agent.assistant'::text, 'agent.tool'::text])))
);

--
-- Name: webhook_deliveries; Type: TABLE; Schema: threadline; Owner: -
--

CREATE TABLE threadline.webhook_deliveries (
    path text NOT NULL,
    delivery text NOT NULL,
    signature text,
    run_id uuid NOT NULL,
    caller text,
    received_at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: webhook_triggers; Type: TABLE; Schema: threadline; Owner: -
--

CREATE TABLE threadline.webhook_triggers (
    path text NOT NULL,
    workflow text NOT NULL,
    secret text,
    map jsonb
);

--
-- Name: worker_lock_keys; Type: SEQUENCE; Schema: threadline; Owner: -
--

CREATE SEQUENCE threadline.worker_lock_keys
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: workflow_versions; Type: TABLE; Schema: threadline; Owner: -
--

CREATE TABLE threadline.workflow_versions (
    slug text NOT NULL,
    version integer NOT NULL,
    hash text NOT NULL,
    recipe jsonb NOT NULL,
    source text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    rolled_back_from integer,
    source_text text,
    CONSTRAINT workflow_versions_source_check CHECK ((source = ANY (ARRAY['create'::text, 'update'::text, 'proposal'::text, 'rollback'::text])))
);

--
-- Name: cleanups id; Type: DEFAULT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.cleanups ALTER COLUMN id SET DEFAULT nextval('threadline.cleanups_id_seq'::regclass);

--
-- Name: decision_audit id; Type: DEFAULT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.decision_audit ALTER COLUMN id SET DEFAULT nextval('threadline.decision_audit_id_seq'::regclass);

--
-- Name: notifications id; Type: DEFAULT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.notifications ALTER COLUMN id SET DEFAULT nextval('threadline.notifications_id_seq'::regclass);

--
-- Name: outside_events id; Type: DEFAULT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.outside_events ALTER COLUMN id SET DEFAULT nextval('threadline.outside_events_id_seq'::regclass);

--
-- Name: proposals id; Type: DEFAULT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.proposals ALTER COLUMN id SET DEFAULT nextval('threadline.proposals_id_seq'::regclass);

--
-- Name: schema_migrations id; Type: DEFAULT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.schema_migrations ALTER COLUMN id SET DEFAULT nextval('threadline.schema_migrations_id_seq'::regclass);

--
-- Name: account_channels account_channels_pkey; Type: CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.account_channels
    ADD CONSTRAINT account_channels_pkey PRIMARY KEY (account_id, channel, target);

--
-- Name: accounts accounts_pkey; Type: CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.accounts
    ADD CONSTRAINT accounts_pkey PRIMARY KEY (id);

--
-- Name: acting acting_pkey; Type: CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.acting
    ADD CONSTRAINT acting_pkey PRIMARY KEY (xact, action);

--
-- Name: action_rules action_rules_pkey; Type: CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.action_rules
    ADD CONSTRAINT action_rules_pkey PRIMARY KEY (action);

--
-- Name: api_tokens api_tokens_pkey; Type: CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.api_tokens
    ADD CONSTRAINT api_tokens_pkey PRIMARY KEY (token_hash);

--
-- Name: authorization_audit authorization_audit_pkey; Type: CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.authorization_audit
    ADD CONSTRAINT authorization_audit_pkey PRIMARY KEY (id);

--
-- Name: bots bots_pkey; Type: CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.bots
    ADD CONSTRAINT bots_pkey PRIMARY KEY (name);

--
-- Name: cleanups cleanups_pkey; Type: CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.cleanups
    ADD CONSTRAINT cleanups_pkey PRIMARY KEY (id);

--
-- Name: console_links console_links_pkey; Type: CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.console_links
    ADD CONSTRAINT console_links_pkey PRIMARY KEY (token_hash);

--
-- Name: console_no_auth console_no_auth_pkey; Type: CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.console_no_auth
    ADD CONSTRAINT console_no_auth_pkey PRIMARY KEY (only_row);

--
-- Name: console_passwords console_passwords_pkey; Type: CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.console_passwords
    ADD CONSTRAINT console_passwords_pkey PRIMARY KEY (account);

--
-- Name: console_sessions console_sessions_pkey; Type: CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.console_sessions
    ADD CONSTRAINT console_sessions_pkey PRIMARY KEY (session_hash);

--
-- Name: decision_audit decision_audit_pkey; Type: CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.decision_audit
    ADD CONSTRAINT decision_audit_pkey PRIMARY KEY (id);

--
-- Name: decisions decisions_pkey; Type: CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.decisions
    ADD CONSTRAINT decisions_pkey PRIMARY KEY (step_key);

--
-- Name: event_waits event_waits_pkey; Type: CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.event_waits
    ADD CONSTRAINT event_waits_pkey PRIMARY KEY (step_key);

--
-- Name: model_prices model_prices_pkey; Type: CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.model_prices
    ADD CONSTRAINT model_prices_pkey PRIMARY KEY (model);

--
-- Name: notifications notifications_event_event_key_rule_target_key; Type: CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.notifications
    ADD CONSTRAINT notifications_event_event_key_rule_target_key UNIQUE (event, event_key, rule, target);

--
-- Name: notifications notifications_pkey; Type: CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.notifications
    ADD CONSTRAINT notifications_pkey PRIMARY KEY (id);

--
-- Name: outside_events outside_events_name_event_id_key; Type: CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.outside_events
    ADD CONSTRAINT outside_events_name_event_id_key UNIQUE (name, event_id);

--
-- Name: outside_events outside_events_pkey; Type: CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.outside_events
    ADD CONSTRAINT outside_events_pkey PRIMARY KEY (id);

--
-- Name: pause pause_pkey; Type: CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.pause
    ADD CONSTRAINT pause_pkey PRIMARY KEY (only_row);

--
-- Name: proposals proposals_pkey; Type: CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.proposals
    ADD CONSTRAINT proposals_pkey PRIMARY KEY (id);

--
-- Name: resume_tokens resume_tokens_pkey; Type: CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.resume_tokens
    ADD CONSTRAINT resume_tokens_pkey PRIMARY KEY (token_hash);

--
-- Name: retention_defaults retention_defaults_pkey; Type: CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.retention_defaults
    ADD CONSTRAINT retention_defaults_pkey PRIMARY KEY (only_row);

--
-- Name: run_counts run_counts_pkey; Type: CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.run_counts
    ADD CONSTRAINT run_counts_pkey PRIMARY KEY (day, workflow, state, step, shard);

--
-- Name: run_journal run_journal_pkey; Type: CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.run_journal
    ADD CONSTRAINT run_journal_pkey PRIMARY KEY (run_id, name);

--
-- Name: run_limits run_limits_pkey; Type: CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.run_limits
    ADD CONSTRAINT run_limits_pkey PRIMARY KEY (kind, name);

--
-- Name: run_threads run_threads_idempotency_key_key; Type: CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.run_threads
    ADD CONSTRAINT run_threads_idempotency_key_key UNIQUE (idempotency_key);

--
-- Name: run_threads run_threads_pkey; Type: CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.run_threads
    ADD CONSTRAINT run_threads_pkey PRIMARY KEY (run_id);

--
-- Name: schedule_ticks schedule_ticks_pkey; Type: CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.schedule_ticks
    ADD CONSTRAINT schedule_ticks_pkey PRIMARY KEY (workflow, slot);

--
-- Name: schema_migrations schema_migrations_pkey; Type: CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.schema_migrations
    ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (name);

--
-- Name: step_claims step_claims_pkey; Type: CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.step_claims
    ADD CONSTRAINT step_claims_pkey PRIMARY KEY (step_key, attempt);

--
-- Name: thread_entries thread_entries_pkey; Type: CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.thread_entries
    ADD CONSTRAINT thread_entries_pkey PRIMARY KEY (run_id, seq);

--
-- Name: webhook_deliveries webhook_deliveries_pkey; Type: CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.webhook_deliveries
    ADD CONSTRAINT webhook_deliveries_pkey PRIMARY KEY (path, delivery);

--
-- Name: webhook_triggers webhook_triggers_pkey; Type: CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.webhook_triggers
    ADD CONSTRAINT webhook_triggers_pkey PRIMARY KEY (path);

--
-- Name: workers workers_lock_key_key; Type: CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.workers
    ADD CONSTRAINT workers_lock_key_key UNIQUE (lock_key);

--
-- Name: workers workers_pkey; Type: CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.workers
    ADD CONSTRAINT workers_pkey PRIMARY KEY (id);

--
-- Name: workflow_versions workflow_versions_pkey; Type: CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.workflow_versions
    ADD CONSTRAINT workflow_versions_pkey PRIMARY KEY (slug, version);

--
-- Name: workflows workflows_pkey; Type: CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.workflows
    ADD CONSTRAINT workflows_pkey PRIMARY KEY (slug);

--
-- Name: accounts_live_name; Type: INDEX; Schema: threadline; Owner: -
--

CREATE UNIQUE INDEX accounts_live_name ON threadline.accounts USING btree (name) WHERE (removed_at IS NULL);

--
-- Name: accounts_name; Type: INDEX; Schema: threadline; Owner: -
--

CREATE INDEX accounts_name ON threadline.accounts USING btree (name, id);

--
-- Name: api_tokens_live_name; Type: INDEX; Schema: threadline; Owner: -
--

CREATE UNIQUE INDEX api_tokens_live_name ON threadline.api_tokens USING btree (name) WHERE (revoked_at IS NULL);

--
-- Name: authorization_audit_run; Type: INDEX; Schema: threadline; Owner: -
--

CREATE INDEX authorization_audit_run ON threadline.authorization_audit USING btree (run_id) WHERE (run_id IS NOT NULL);

--
-- Name: console_links_expiry; Type: INDEX; Schema: threadline; Owner: -
--

CREATE INDEX console_links_expiry ON threadline.console_links USING btree (expires_at);

--
-- Name: console_sessions_expiry; Type: INDEX; Schema: threadline; Owner: -
--

CREATE INDEX console_sessions_expiry ON threadline.console_sessions USING btree (expires_at);

--
-- Name: decision_audit_run; Type: INDEX; Schema: threadline; Owner: -
--

CREATE INDEX decision_audit_run ON threadline.decision_audit USING btree (run_id, created_at);

--
-- Name: event_waits_names; Type: INDEX; Schema: threadline; Owner: -
--

CREATE INDEX event_waits_names ON threadline.event_waits USING gin (names);

--
-- Name: notifications_due; Type: INDEX; Schema: threadline; Owner: -
--

CREATE INDEX notifications_due ON threadline.notifications USING btree (next_at) WHERE (status = 'pending'::text);

--
-- Name: outside_events_lookup; Type: INDEX; Schema: threadline; Owner: -
--

CREATE INDEX outside_events_lookup ON threadline.outside_events USING btree (name, key, received_at);

--
-- Name: proposals_workflow; Type: INDEX; Schema: threadline; Owner: -
--

CREATE INDEX proposals_workflow ON threadline.proposals USING btree (workflow, created_at DESC);

--
-- Name: resume_tokens_gate; Type: INDEX; Schema: threadline; Owner: -
--

CREATE INDEX resume_tokens_gate ON threadline.resume_tokens USING btree (gate_key);

--
-- Name: run_threads_active_top; Type: INDEX; Schema: threadline; Owner: -
--

CREATE INDEX run_threads_active_top ON threadline.run_threads USING btree (initiator) WHERE ((parent_run_id IS NULL) AND (admitted_at IS NOT NULL) AND (state <> ALL (ARRAY['completed'::text, 'failed'::text, 'cancelled'::text])));

--
-- Name: run_threads_awaits; Type: INDEX; Schema: threadline; Owner: -
--

CREATE INDEX run_threads_awaits ON threadline.run_threads USING btree (await_kind) WHERE (state = ANY (ARRAY['running'::text, 'waiting'::text]));

--
-- Name: run_threads_bot_steps; Type: INDEX; Schema: threadline; Owner: -
--

CREATE INDEX run_threads_bot_steps ON threadline.run_threads USING btree (run_id) WHERE ((state = 'running'::text) AND (await_kind = 'bot'::text));

--
-- Name: run_threads_created; Type: INDEX; Schema: threadline; Owner: -
--

CREATE INDEX run_threads_created ON threadline.run_threads USING btree (created_at DESC, run_id);

--
-- Name: run_threads_finished_top; Type: INDEX; Schema: threadline; Owner: -
--

CREATE INDEX run_threads_finished_top ON threadline.run_threads USING btree (finished_at) WHERE ((parent_run_id IS NULL) AND (state = ANY (ARRAY['completed'::text, 'failed'::text, 'cancelled'::text])));

--
-- Name: run_threads_id_tail; Type: INDEX; Schema: threadline; Owner: -
--

CREATE INDEX run_threads_id_tail ON threadline.run_threads USING btree (reverse((run_id)::text) text_pattern_ops);

--
-- Name: run_threads_parent; Type: INDEX; Schema: threadline; Owner: -
--

CREATE INDEX run_threads_parent ON threadline.run_threads USING btree (parent_run_id) WHERE (parent_run_id IS NOT NULL);

--
-- Name: run_threads_queued; Type: INDEX; Schema: threadline; Owner: -
--

CREATE INDEX run_threads_queued ON threadline.run_threads USING btree (workflow, queue_seq) WHERE (state = 'queued'::text);

--
-- Name: run_threads_search; Type: INDEX; Schema: threadline; Owner: -
--

CREATE INDEX run_threads_search ON threadline.run_threads USING gin (threadline.run_search_text(run_id, payload) threadline.gin_trgm_ops);

--
-- Name: run_threads_state_created; Type: INDEX; Schema: threadline; Owner: -
--

CREATE INDEX run_threads_state_created ON threadline.run_threads USING btree (state, created_at DESC);

--
-- Name: run_threads_workflow_created; Type: INDEX; Schema: threadline; Owner: -
--

CREATE INDEX run_threads_workflow_created ON threadline.run_threads USING btree (workflow, created_at DESC);

--
-- Name: step_claims_open; Type: INDEX; Schema: threadline; Owner: -
--

CREATE INDEX step_claims_open ON threadline.step_claims USING btree (worker_id) WHERE (finished_at IS NULL);

--
-- Name: step_claims_run; Type: INDEX; Schema: threadline; Owner: -
--

CREATE INDEX step_claims_run ON threadline.step_claims USING btree (run_id);

--
-- Name: step_claims_started; Type: INDEX; Schema: threadline; Owner: -
--

CREATE INDEX step_claims_started ON threadline.step_claims USING btree (started_at DESC);

--
-- Name: thread_entries_agent_turns; Type: INDEX; Schema: threadline; Owner: -
--

CREATE INDEX thread_entries_agent_turns ON threadline.thread_entries USING btree (created_at) WHERE (kind = 'agent.assistant'::text);

--
-- Name: thread_entries_dedupe; Type: INDEX; Schema: threadline; Owner: -
--

CREATE UNIQUE INDEX thread_entries_dedupe ON threadline.thread_entries USING btree (run_id, dedupe_key) WHERE (dedupe_key IS NOT NULL);

--
-- Name: thread_entries_step_key; Type: INDEX; Schema: threadline; Owner: -
--

CREATE INDEX thread_entries_step_key ON threadline.thread_entries USING btree (step_key, kind) WHERE (step_key IS NOT NULL);

--
-- Name: webhook_deliveries_signature; Type: INDEX; Schema: threadline; Owner: -
--

CREATE UNIQUE INDEX webhook_deliveries_signature ON threadline.webhook_deliveries USING btree (signature) WHERE (signature IS NOT NULL);

--
-- Name: webhook_triggers_workflow; Type: INDEX; Schema: threadline; Owner: -
--

CREATE INDEX webhook_triggers_workflow ON threadline.webhook_triggers USING btree (workflow);

--
-- Name: workflow_versions_hash; Type: INDEX; Schema: threadline; Owner: -
--

CREATE INDEX workflow_versions_hash ON threadline.workflow_versions USING btree (slug, hash);

--
-- Name: workflows_on_event; Type: INDEX; Schema: threadline; Owner: -
--

CREATE INDEX workflows_on_event ON threadline.workflows USING btree (((recipe ->> 'on_event'::text))) WHERE (recipe ? 'on_event'::text);

--
-- Name: decision_audit decision_audit_link_account; Type: TRIGGER; Schema: threadline; Owner: -
--

CREATE TRIGGER decision_audit_link_account BEFORE INSERT ON threadline.decision_audit FOR EACH ROW EXECUTE FUNCTION threadline.link_account_is_the_subjects();

--
-- Name: decisions decisions_announce; Type: TRIGGER; Schema: threadline; Owner: -
--

CREATE TRIGGER decisions_announce AFTER INSERT ON threadline.decisions FOR EACH ROW EXECUTE FUNCTION threadline.announce_change();

--
-- Name: decisions decisions_by_link_audited; Type: TRIGGER; Schema: threadline; Owner: -
--

CREATE CONSTRAINT TRIGGER decisions_by_link_audited AFTER INSERT ON threadline.decisions DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN ((new.via = 'link'::text)) EXECUTE FUNCTION threadline.link_decision_audited();

--
-- Name: decisions decisions_by_token; Type: TRIGGER; Schema: threadline; Owner: -
--

CREATE TRIGGER decisions_by_token BEFORE INSERT ON threadline.decisions FOR EACH ROW EXECUTE FUNCTION threadline.decision_by_token();

--
-- Name: decisions decisions_link_account; Type: TRIGGER; Schema: threadline; Owner: -
--

CREATE TRIGGER decisions_link_account BEFORE INSERT ON threadline.decisions FOR EACH ROW EXECUTE FUNCTION threadline.link_account_is_the_subjects();

--
-- Name: resume_tokens resume_tokens_subject_account; Type: TRIGGER; Schema: threadline; Owner: -
--

CREATE TRIGGER resume_tokens_subject_account BEFORE INSERT ON threadline.resume_tokens FOR EACH ROW EXECUTE FUNCTION threadline.resume_token_subject_account();

--
-- Name: run_threads run_threads_announce; Type: TRIGGER; Schema: threadline; Owner: -
--

CREATE TRIGGER run_threads_announce AFTER INSERT OR UPDATE ON threadline.run_threads FOR EACH ROW EXECUTE FUNCTION threadline.announce_change();

--
-- Name: run_threads run_threads_child_finished; Type: TRIGGER; Schema: threadline; Owner: -
--

CREATE TRIGGER run_threads_child_finished AFTER UPDATE OF state ON threadline.run_threads FOR EACH ROW WHEN (((new.parent_run_id IS NOT NULL) AND (new.state = ANY (ARRAY['completed'::text, 'failed'::text, 'cancelled'::text])) AND (old.state <> ALL (ARRAY['completed'::text, 'failed'::text, 'cancelled'::text])))) EXECUTE FUNCTION threadline.child_finished('threadline');

--
-- Name: run_threads run_threads_count; Type: TRIGGER; Schema: threadline; Owner: -
--

CREATE TRIGGER run_threads_count AFTER INSERT OR DELETE ON threadline.run_threads FOR EACH ROW EXECUTE FUNCTION threadline.count_runs();

--
-- Name: run_threads run_threads_count_moves; Type: TRIGGER; Schema: threadline; Owner: -
--

CREATE TRIGGER run_threads_count_moves AFTER UPDATE OF state, current_step, parent_run_id, trigger, workflow, created_at ON threadline.run_threads FOR EACH ROW WHEN (((old.state IS DISTINCT FROM new.state) OR ((new.state = 'failed'::text) AND (old.current_step IS DISTINCT FROM new.current_step)) OR (old.parent_run_id IS DISTINCT FROM new.parent_run_id) OR ((old.trigger ->> 'what'::text) IS DISTINCT FROM (new.trigger ->> 'what'::text)) OR (old.workflow IS DISTINCT FROM new.workflow) OR (old.created_at IS DISTINCT FROM new.created_at))) EXECUTE FUNCTION threadline.count_runs();

--
-- Name: run_threads run_threads_finished_admit; Type: TRIGGER; Schema: threadline; Owner: -
--

CREATE TRIGGER run_threads_finished_admit AFTER UPDATE OF state ON threadline.run_threads FOR EACH ROW WHEN (((new.state = ANY (ARRAY['completed'::text, 'failed'::text, 'cancelled'::text])) AND (old.state <> ALL (ARRAY['completed'::text, 'failed'::text, 'cancelled'::text, 'queued'::text])) AND (new.admitted_at IS NOT NULL))) EXECUTE FUNCTION threadline.run_finished_admit('threadline');

--
-- Name: run_threads run_threads_leave_no_entries; Type: TRIGGER; Schema: threadline; Owner: -
--

CREATE TRIGGER run_threads_leave_no_entries AFTER DELETE ON threadline.run_threads REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION threadline.runs_leave_no_entries();

--
-- Name: run_threads run_threads_workflow_exists; Type: TRIGGER; Schema: threadline; Owner: -
--

CREATE TRIGGER run_threads_workflow_exists AFTER INSERT OR UPDATE OF workflow ON threadline.run_threads FOR EACH ROW EXECUTE FUNCTION threadline.run_workflow_exists();

--
-- Name: step_claims step_claims_announce; Type: TRIGGER; Schema: threadline; Owner: -
--

CREATE TRIGGER step_claims_announce AFTER INSERT OR UPDATE ON threadline.step_claims FOR EACH ROW EXECUTE FUNCTION threadline.announce_change();

--
-- Name: workers workers_announce; Type: TRIGGER; Schema: threadline; Owner: -
--

CREATE TRIGGER workers_announce AFTER INSERT OR DELETE ON threadline.workers FOR EACH ROW EXECUTE FUNCTION threadline.announce_change();

--
-- Name: workflow_versions workflow_versions_immutable; Type: TRIGGER; Schema: threadline; Owner: -
--

CREATE TRIGGER workflow_versions_immutable BEFORE DELETE OR UPDATE ON threadline.workflow_versions FOR EACH ROW EXECUTE FUNCTION threadline.versions_are_immutable();

--
-- Name: workflow_versions workflow_versions_not_truncated; Type: TRIGGER; Schema: threadline; Owner: -
--

CREATE TRIGGER workflow_versions_not_truncated BEFORE TRUNCATE ON threadline.workflow_versions FOR EACH STATEMENT EXECUTE FUNCTION threadline.versions_are_immutable();

--
-- Name: workflows workflows_announce; Type: TRIGGER; Schema: threadline; Owner: -
--

CREATE TRIGGER workflows_announce AFTER INSERT OR UPDATE ON threadline.workflows FOR EACH ROW EXECUTE FUNCTION threadline.announce_change();

--
-- Name: workflows workflows_schedule_enabled; Type: TRIGGER; Schema: threadline; Owner: -
--

CREATE TRIGGER workflows_schedule_enabled BEFORE INSERT OR UPDATE ON threadline.workflows FOR EACH ROW EXECUTE FUNCTION threadline.track_schedule_enabled();

--
-- Name: workflows workflows_webhook_triggers; Type: TRIGGER; Schema: threadline; Owner: -
--

CREATE TRIGGER workflows_webhook_triggers AFTER INSERT OR UPDATE OF recipe ON threadline.workflows FOR EACH ROW EXECUTE FUNCTION threadline.sync_webhook_triggers();

--
-- Name: workflows workflows_without_runs; Type: TRIGGER; Schema: threadline; Owner: -
--

CREATE TRIGGER workflows_without_runs BEFORE DELETE OR UPDATE OF slug ON threadline.workflows FOR EACH ROW EXECUTE FUNCTION threadline.workflow_without_runs();

--
-- Name: account_channels account_channels_account_id_fkey; Type: FK CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.account_channels
    ADD CONSTRAINT account_channels_account_id_fkey FOREIGN KEY (account_id) REFERENCES threadline.accounts(id);

--
-- Name: api_tokens api_tokens_account_id_fkey; Type: FK CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.api_tokens
    ADD CONSTRAINT api_tokens_account_id_fkey FOREIGN KEY (account_id) REFERENCES threadline.accounts(id);

--
-- Name: api_tokens api_tokens_minted_by_fkey; Type: FK CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.api_tokens
    ADD CONSTRAINT api_tokens_minted_by_fkey FOREIGN KEY (minted_by) REFERENCES threadline.accounts(id);

--
-- Name: decisions decisions_run_id_fkey; Type: FK CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.decisions
    ADD CONSTRAINT decisions_run_id_fkey FOREIGN KEY (run_id) REFERENCES threadline.run_threads(run_id);

--
-- Name: event_waits event_waits_run_id_fkey; Type: FK CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.event_waits
    ADD CONSTRAINT event_waits_run_id_fkey FOREIGN KEY (run_id) REFERENCES threadline.run_threads(run_id);

--
-- Name: notifications notifications_run_id_fkey; Type: FK CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.notifications
    ADD CONSTRAINT notifications_run_id_fkey FOREIGN KEY (run_id) REFERENCES threadline.run_threads(run_id);

--
-- Name: proposals proposals_workflow_fkey; Type: FK CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.proposals
    ADD CONSTRAINT proposals_workflow_fkey FOREIGN KEY (workflow) REFERENCES threadline.workflows(slug);

--
-- Name: resume_tokens resume_tokens_run_id_fkey; Type: FK CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.resume_tokens
    ADD CONSTRAINT resume_tokens_run_id_fkey FOREIGN KEY (run_id) REFERENCES threadline.run_threads(run_id);

--
-- Name: resume_tokens resume_tokens_subject_account_fkey; Type: FK CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.resume_tokens
    ADD CONSTRAINT resume_tokens_subject_account_fkey FOREIGN KEY (subject_account) REFERENCES threadline.accounts(id);

--
-- Name: run_threads run_threads_parent_run_id_fkey; Type: FK CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.run_threads
    ADD CONSTRAINT run_threads_parent_run_id_fkey FOREIGN KEY (parent_run_id) REFERENCES threadline.run_threads(run_id);

--
-- Name: schedule_ticks schedule_ticks_workflow_fkey; Type: FK CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.schedule_ticks
    ADD CONSTRAINT schedule_ticks_workflow_fkey FOREIGN KEY (workflow) REFERENCES threadline.workflows(slug);

--
-- Name: step_claims step_claims_run_id_fkey; Type: FK CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.step_claims
    ADD CONSTRAINT step_claims_run_id_fkey FOREIGN KEY (run_id) REFERENCES threadline.run_threads(run_id);

--
-- Name: webhook_deliveries webhook_deliveries_run_id_fkey; Type: FK CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.webhook_deliveries
    ADD CONSTRAINT webhook_deliveries_run_id_fkey FOREIGN KEY (run_id) REFERENCES threadline.run_threads(run_id);

--
-- Name: webhook_triggers webhook_triggers_workflow_fkey; Type: FK CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.webhook_triggers
    ADD CONSTRAINT webhook_triggers_workflow_fkey FOREIGN KEY (workflow) REFERENCES threadline.workflows(slug) ON DELETE CASCADE;

--
-- Name: workflow_versions workflow_versions_slug_fkey; Type: FK CONSTRAINT; Schema: threadline; Owner: -
--

ALTER TABLE ONLY threadline.workflow_versions
    ADD CONSTRAINT workflow_versions_slug_fkey FOREIGN KEY (slug) REFERENCES threadline.workflows(slug);

--
-- PostgreSQL database dump complete
--
