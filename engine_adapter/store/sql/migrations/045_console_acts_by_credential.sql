-- The console's login changes state only for a person who presents a credential, checked here.
--
--   * Who may do what lives in one place, authorization.py's RULES; the migrate step copies it
--     into threadline.action_rules (authorization.sync_rules), which the functions below read. A
--     test holds the two equal.
--   * Console sessions move into the database (threadline.console_sessions, only the sha256 of
--     each session id kept) so that a function can resolve one to its account and roles. No
--     process login writes the table: sessions open and close through the functions below.
--   * threadline.authenticate(credential, action, account) resolves a session id or an API token
--     (by its hash) to its account, refuses a missing, unknown, expired, closed or revoked one and
--     one whose roles RULES does not give the action, and keeps the person it found as the actor
--     of this transaction, for that action (threadline.acting). Then, for the console's login
--     only, the writing functions ask for that actor: a decision is recorded only as that actor
--     and only by one of the gate's approvers, a person's thread entry only in that actor's name,
--     a run started, a retry emitted or a token minted only under an action it was allowed, an
--     allowed action audited only as it. The owner's login (the CLI run by the install's owner,
--     who holds the database anyway) and the conductor are not asked: their callers are trusted.

create table threadline.action_rules (
  action            text primary key,
  verb              text not null,
  roles             text[] not null,  -- any one of them; {} = any signed-in person
  admin             boolean not null,
  admin_for_others  boolean not null
);

create table threadline.console_sessions (
  session_hash  text primary key,  -- sha256 (hex) of the session id the cookie carries
  account       text not null,
  roles         text[] not null,
  via           text not null check (via in ('token', 'password', 'no-auth')),
  created_at    timestamptz not null default now(),
  expires_at    timestamptz not null,
  closed_at     timestamptz
);
create index console_sessions_expiry on threadline.console_sessions (expires_at);

-- The person a transaction acts for, per action it was allowed (rows of ended transactions are
-- dropped as new ones come).
create unlogged table threadline.acting (
  xact    xid8 not null,
  action  text not null,
  actor   jsonb not null,
  primary key (xact, action)
);

create function threadline.sha256_hex (p_secret text) returns text
  language sql immutable
  set search_path = pg_catalog, pg_temp
as $$
  select encode(sha256(convert_to(p_secret, 'UTF8')), 'hex')
$$;

-- A refusal of a person's action, worded as authorization.message words it.
create function threadline.refuse_person (p_who text, p_verb text, p_reason text) returns void
  language plpgsql
  set search_path = pg_catalog, pg_temp
as $$
begin
  raise exception '% may not %: %', p_who, p_verb, p_reason using errcode = 'insufficient_privilege';
end;
$$;

-- A new console session for p_account (the console checked the sign-in link or password).
create function threadline.open_console_session (
  p_session text, p_account text, p_roles text[], p_via text, p_days integer
) returns void
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  perform threadline.require_caller(array['console'], 'opening a console session');
  if length(coalesce(p_session, '')) < 32 then
    raise exception 'a session id needs at least 32 characters' using errcode = '22023';
  end if;
  if p_days not between 1 and 30 then
    raise exception 'a session lasts 1 to 30 days, not %', p_days using errcode = '22023';
  end if;
  delete from threadline.console_sessions where expires_at < now() - interval '1 day';
  -- The account of a name signing in is made on its first use (accounts.ensure), unless it was
  -- removed: an admin adds it again.
  if p_account ~ '^[A-Za-z0-9_.@-]{1,100}$'
     and not exists (select 1 from threadline.accounts a where a.name = p_account) then
    insert into threadline.accounts (name, created_by) values (p_account, 'console sign-in')
    on conflict do nothing;
  end if;
  insert into threadline.console_sessions (session_hash, account, roles, via, expires_at)
  values (threadline.sha256_hex(p_session), p_account, p_roles, p_via,
          now() + make_interval(days => p_days));
end;
$$;

-- The live session p_session names (no row: closed, expired or never opened).
create function threadline.console_session (p_session text)
  returns table (account text, roles text[], via text)
  language sql stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select s.account, s.roles, s.via from threadline.console_sessions s
   where s.session_hash = threadline.sha256_hex(p_session)
     and s.closed_at is null and s.expires_at > now()
$$;

-- Sign-out: the session ends for good; returns whose it was (null: it was not live).
create function threadline.close_console_session (p_session text) returns text
  language sql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  update threadline.console_sessions s set closed_at = now()
   where s.session_hash = threadline.sha256_hex(p_session)
     and s.closed_at is null and s.expires_at > now()
  returning s.account
$$;

-- The person a credential is (a console session id or an API token), if allowed p_action (for
-- p_account, where the action names one); else an insufficient_privilege error saying why.
-- Returns {name, account_id, roles, via, minted_by, label}; kept as this transaction's actor.
create function threadline.authenticate (
  p_credential text, p_action text, p_account text default null
) returns jsonb
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
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

-- The console login's actor for one of p_actions in this transaction (null for another login);
-- refused where it presented no credential for any of them.
create function threadline.console_actor (p_actions text[], p_what text) returns jsonb
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
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

-- A decision the console records: as the person who presented the credential, for nobody else,
-- on the gate the run waits at, by one of its approvers, and not its own run's gate unless the
-- gate allows self-approval.
create function threadline.check_console_decision (p_row jsonb) returns void
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
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
$$;

-- A person's thread entry the console writes: only in the name of the person who signed in.
create function threadline.check_console_entry (p_author_kind text, p_author text) returns void
  language plpgsql stable
  set search_path = pg_catalog, pg_temp
as $$
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

-- Adds p_lines after the first p_after in a function's definition (as in migration 032).
create or replace function pg_temp.add_after (p_fn regprocedure, p_after text, p_lines text)
  returns void
  language plpgsql
as $f$
declare
  v_def text := pg_get_functiondef(p_fn);
  v_at integer := strpos(v_def, p_after);
begin
  if v_at = 0 then
    raise exception '% has changed: "%" is not where expected', p_fn, p_after;
  end if;
  execute overlay(v_def placing p_after || p_lines from v_at for length(p_after));
end;
$f$;

-- The checks, where each writing function begins (the console's login only).
select pg_temp.add_after('threadline.record_decision(jsonb)', E'\nbegin\n',
  $$  perform threadline.check_console_decision(p_row);
$$);
select pg_temp.add_after(
  'threadline.append_entry(uuid, text, text, text, text, text, text, jsonb)', E'\nbegin\n',
  $$  perform threadline.check_console_entry(p_author_kind, p_author);
$$);
select pg_temp.add_after('threadline.lock_run(uuid)', E'\nbegin\n',
  $$  perform threadline.console_actor(null, 'locking a run');
$$);
select pg_temp.add_after(
  'threadline.emit_retry(text, uuid, text, jsonb)', E'\nbegin\n',
  $$  perform threadline.console_actor(array['retry'], 'retrying a run');
$$);
select pg_temp.add_after(
  'threadline.spawn_run(text, text, integer, jsonb, text, integer, text, jsonb, jsonb, text, '
  'text, text, jsonb, jsonb, jsonb)', E'\nbegin\n',
  $$  if threadline.caller_kind() = 'console' and (p_trigger ->> 'caller') is distinct from
       (threadline.console_actor(array['spawn', 'rerun'], 'starting a run') ->> 'name') then
    perform threadline.refuse('starting a run in the name of ' || (p_trigger ->> 'caller'));
  end if;
$$);
select pg_temp.add_after('threadline.mint_api_token(jsonb)', E'\nbegin\n',
  $$  if threadline.caller_kind() = 'console' and (p_row ->> 'minted_by') is distinct from
       (threadline.console_actor(array['mint_token'], 'minting an API token') ->> 'account_id') then
    perform threadline.refuse('minting an API token as another account');
  end if;
$$);
select pg_temp.add_after('threadline.audit_authorization(jsonb)', E'\nbegin\n',
  $$  if threadline.caller_kind() = 'console' and p_row ->> 'outcome' = 'allowed'
     and (p_row ->> 'actor') is distinct from (threadline.console_actor(
           array[p_row ->> 'action'], 'auditing an allowed action') ->> 'name') then
    perform threadline.refuse('auditing an action as allowed for another person');
  end if;
$$);
select pg_temp.add_after('threadline.audit_decision(jsonb)', E'\nbegin\n',
  $$  if threadline.caller_kind() = 'console' and p_row ->> 'outcome' = 'decided'
     and (p_row ->> 'actor') is distinct from (threadline.console_actor(
           array['decide', 'reply'], 'auditing a decision') ->> 'name') then
    perform threadline.refuse('auditing a decision by another person');
  end if;
$$);

-- The console's login keeps no table write that only the CLI's commands used (those connect as
-- the owner): accounts, channels and token revocation are an admin's; bots, prices, limits,
-- pause, retention and cleanup are set by `threadline` commands; resume links are issued by the
-- conductor. What it still writes directly is listed under [threadline_console] in grants.txt.
revoke insert, update on threadline.accounts from threadline_console;
revoke insert, delete on threadline.account_channels from threadline_console;
revoke update (revoked_at) on threadline.api_tokens from threadline_console;
revoke insert, update, delete on threadline.bots, threadline.model_prices, threadline.run_limits,
  threadline.pause, threadline.retention_defaults, threadline.cleanups, threadline.resume_tokens
  from threadline_console;
revoke usage on sequence threadline.cleanups_id_seq, threadline.schema_migrations_id_seq
  from threadline_console;

-- The engine's cancel and in-place retry of a run's task, for every caller: the console's login
-- only for a person allowed to cancel or retry (it no longer writes the engine's tables).
create function threadline.cancel_run_task (p_queue text, p_run_id uuid) returns void
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  perform threadline.require_caller(array['conductor', 'console'], 'cancelling a run');
  perform threadline.console_actor(array['cancel'], 'cancelling a run');
  perform absurd.cancel_task(p_queue, p_run_id);
end;
$$;

create function threadline.retry_run_task (p_queue text, p_run_id uuid) returns void
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  perform threadline.require_caller(array['console'], 'retrying a run in the engine');
  perform threadline.console_actor(array['retry'], 'retrying a run in the engine');
  perform absurd.retry_task(p_queue, p_run_id, '{}'::jsonb);
end;
$$;
revoke all on routine threadline.cancel_run_task (text, uuid),
  threadline.retry_run_task (text, uuid) from public;
grant execute on function threadline.cancel_run_task (text, uuid)
  to threadline_conductor, threadline_console;
grant execute on function threadline.retry_run_task (text, uuid) to threadline_console;
revoke insert, update, delete on absurd.r_threadline, absurd.t_threadline, absurd.w_threadline
  from threadline_console;
-- Absurd's own cancel and retry (which run as their owner since migration 044) only through the
-- two above: called directly they would ask for no one.
revoke all on function absurd.cancel_task (text, uuid), absurd.retry_task (text, uuid, jsonb)
  from threadline_console;

-- A presented API token's account, while neither it is revoked nor its account removed, and
-- who minted it; marks it used (the console's login updates no token row itself).
create function threadline.api_token_account (p_token text)
  returns table (name text, account_id bigint, roles text[], minted_by text, minter_id bigint)
  language sql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  update threadline.api_tokens t set last_used_at = now()
    from threadline.accounts a, threadline.accounts m
   where t.token_hash = threadline.sha256_hex(p_token) and t.revoked_at is null
     and a.id = t.account_id and a.removed_at is null and m.id = t.minted_by
  returning a.name, a.id, t.roles, m.name, m.id
$$;
revoke all on routine threadline.api_token_account (text) from public;
grant execute on function threadline.api_token_account (text) to threadline_console;
revoke update (last_used_at) on threadline.api_tokens from threadline_console;
-- Sequences only the checked functions draw from (queue_run) or other processes use.
revoke usage on sequence threadline.run_queue_seq, threadline.worker_lock_keys
  from threadline_console;

-- Grants: the rules and sessions are read and written only through the functions above.
revoke all on threadline.action_rules, threadline.console_sessions, threadline.acting
  from public, threadline_conductor, threadline_bots, threadline_console, threadline_hooks,
       threadline_viewer;
grant select on threadline.action_rules to threadline_console, threadline_viewer;
do $$
declare
  v_fn regprocedure;
begin
  foreach v_fn in array array[
    'threadline.sha256_hex(text)', 'threadline.refuse_person(text, text, text)',
    'threadline.open_console_session(text, text, text[], text, integer)',
    'threadline.console_session(text)', 'threadline.close_console_session(text)',
    'threadline.authenticate(text, text, text)', 'threadline.console_actor(text[], text)',
    'threadline.check_console_decision(jsonb)', 'threadline.check_console_entry(text, text)']
  loop
    execute format('revoke all on routine %s from public', v_fn);
  end loop;
end;
$$;
grant execute on function
  threadline.open_console_session (text, text, text[], text, integer),
  threadline.console_session (text), threadline.close_console_session (text),
  threadline.authenticate (text, text, text)
  to threadline_console;
