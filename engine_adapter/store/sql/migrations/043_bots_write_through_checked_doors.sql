-- The bots' login holds no table or sequence write: each write a bot process makes goes through a
-- security-definer function that checks its caller and its arguments.
--
--   * A process registers as its own kind only (a bot never as a conductor), and registering
--     takes the process's liveness lock on the calling connection: its heartbeat and its clean
--     stop are accepted only from the session holding that lock, so no other connection of the
--     same login may beat for, or stop, a process it is not.
--   * A claim is taken only of an instruction that is open (the run awaits a bot's step and no
--     live attempt holds it), for a live bot process. The claim hands its attempt a secret (its
--     hash alone is kept): renewing the lease, recording the process group, closing the attempt
--     and reporting its end each need that secret, so knowing an attempt's number (every bot may
--     read the claims) is not enough to end it or to forge its result.
--   * A bot's terminal entry (signal.*, deduplicated as terminal:<step>) is written only by the
--     report of the attempt that holds the step, in the same transaction; a bot may no longer
--     release a step itself (emit_step_done): its report does.

alter table threadline.step_claims add column secret_hash bytea;
alter table threadline.step_claims add column reported_xact xid8;

-- The hash an attempt's secret is kept as.
create function threadline.claim_secret_hash (p_secret text) returns bytea
  language sql immutable
  set search_path = pg_catalog, pg_temp
as $$
  select sha256(convert_to(coalesce(p_secret, ''), 'UTF8'))
$$;

-- Whether this session holds process p_id's liveness lock (taken by register_worker), and the
-- process is of the caller's kind. The owner may act for any process.
create function threadline.own_worker (p_id text) returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select threadline.caller_kind() = 'owner' or exists (
    select 1
      from threadline.workers w
      join pg_locks l on l.locktype = 'advisory' and l.classid = 7411 and l.objid = w.lock_key
                     and l.objsubid = 2 and l.granted and l.mode = 'ExclusiveLock'
     where w.id = p_id and w.kind = threadline.caller_kind() and l.pid = pg_backend_pid())
$$;

-- A new process of the caller's kind; takes its liveness lock (7411, lock key) on this session,
-- which holds it for the process's life. Returns the lock key.
create function threadline.register_worker (
  p_id text, p_kind text, p_host text, p_pid integer, p_version text, p_sandbox text
)
  returns integer
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
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

-- A process's heartbeat (p_stop: its clean stop), from the session holding its lock only.
create function threadline.beat_worker (p_id text, p_stop boolean) returns void
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
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

-- The attempt p_attempt of p_step_key, locked, when p_secret is its secret; refused otherwise
-- (no such attempt, or another's secret).
create function threadline.held_claim (p_step_key text, p_attempt integer, p_secret text)
  returns threadline.step_claims
  language plpgsql
  set search_path = pg_catalog, pg_temp
as $$
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

-- Migration 025's claim (with 029's step_key_free), run as the owner: only for a live bot
-- process (the owner's tests may claim for any), a lease of at most an hour; the claim's secret
-- is returned to its taker alone.
create or replace function threadline.claim_step (p_bots text[], p_worker_id text, p_host text,
                                                  p_lease_s double precision)
  returns jsonb
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
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
     where rt.awaiting and rt.await_kind = 'bot' and rt.state = 'running'
       and (p_bots is null or rt.bot = any (p_bots))
       and threadline.step_key_free(rt.await_key)
     order by rt.updated_at
     limit 2
       for update of rt skip locked
  loop
    v_found := v_found + 1;
    if v_found = 1 then
      v_first := v_cand;
    end if;
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

-- A running attempt's heartbeat: its lease renewed (and its process group, once known); returns
-- whether it is still current and its run still awaits it. Needs the attempt's secret.
create function threadline.renew_claim (p_step_key text, p_attempt integer, p_secret text,
                                        p_lease_s double precision, p_pgid integer)
  returns boolean
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
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

-- Where an open attempt's process group runs. Needs the attempt's secret.
create function threadline.set_claim_pgid (p_step_key text, p_attempt integer, p_secret text,
                                           p_pgid integer)
  returns void
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  perform threadline.held_claim(p_step_key, p_attempt, p_secret);
  update threadline.step_claims set pgid = p_pgid
   where step_key = p_step_key and attempt = p_attempt and finished_at is null;
end;
$$;

-- An open attempt closed without a result (its run no longer awaits it). Needs its secret.
create function threadline.cancel_claim (p_step_key text, p_attempt integer, p_secret text)
  returns void
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  perform threadline.held_claim(p_step_key, p_attempt, p_secret);
  update threadline.step_claims set finished_at = now(), outcome = 'cancelled'
   where step_key = p_step_key and attempt = p_attempt and finished_at is null;
end;
$$;

-- Migration 025's report, run as the owner, for the attempt whose secret it presents: the
-- outcome is completed or failed, and the terminal entry it writes is a bot's result for this
-- step (so append_entry lets it through: reported_xact).
drop function threadline.report_step (text, uuid, text, integer, text, text, double precision,
                                      text, text, text, text, jsonb, integer);
create function threadline.report_step (
  p_queue text, p_run_id uuid, p_step_key text, p_attempt integer, p_secret text, p_bot text,
  p_outcome text, p_backoff_s double precision, p_note text, p_message text,
  p_terminal_kind text, p_terminal_text text, p_payload jsonb, p_exit_code integer
)
  returns text
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
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
    from threadline.run_threads where run_id = p_run_id for update;
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

-- A bot writes a terminal entry (signal.*, or a terminal: dedupe key) only through its report,
-- for the step whose attempt it reported in this transaction (migration 032's append_entry, with
-- that check after its caller's).
do $$
declare
  v_def constant text := pg_get_functiondef(
    'threadline.append_entry(uuid, text, text, text, text, text, text, jsonb)'::regprocedure);
  v_at constant text := E'  if v_caller = ''hooks'' then\n    v_token :=';
begin
  if position(v_at in v_def) = 0 then
    raise exception 'threadline.append_entry does not read as migration 032 wrote it';
  end if;
  execute replace(v_def, v_at, E'  if v_caller = ''bots'''
    || E' and (starts_with(p_kind, ''signal.'') or starts_with(p_dedupe_key, ''terminal:''))\n'
    || E'     and not exists (select 1 from threadline.step_claims c\n'
    || E'                      where c.step_key = p_step_key and c.run_id = p_run_id\n'
    || E'                        and c.reported_xact = pg_current_xact_id()) then\n'
    || E'    perform threadline.refuse(format(''writing a %s entry'', p_kind));\n'
    || E'  end if;\n' || v_at);
end;
$$;

-- Grants: the bots read what they serve; they write only through the functions above.
revoke insert, update, delete on all tables in schema threadline, absurd from threadline_bots;
revoke update (updated_at) on threadline.run_threads from threadline_bots;
revoke usage on all sequences in schema threadline, absurd from threadline_bots;
revoke all on function threadline.emit_step_done (text, uuid, text, jsonb) from threadline_bots;
revoke all on function threadline.claim_secret_hash (text), threadline.own_worker (text),
  threadline.held_claim (text, integer, text) from public;
revoke all on function threadline.register_worker (text, text, text, integer, text, text),
  threadline.beat_worker (text, boolean),
  threadline.renew_claim (text, integer, text, double precision, integer),
  threadline.set_claim_pgid (text, integer, text, integer),
  threadline.cancel_claim (text, integer, text),
  threadline.report_step (text, uuid, text, integer, text, text, text, double precision, text,
                          text, text, text, jsonb, integer)
  from public;
grant execute on function threadline.register_worker (text, text, text, integer, text, text),
  threadline.beat_worker (text, boolean)
  to threadline_bots, threadline_conductor;
grant execute on function threadline.renew_claim (text, integer, text, double precision, integer),
  threadline.set_claim_pgid (text, integer, text, integer),
  threadline.cancel_claim (text, integer, text),
  threadline.report_step (text, uuid, text, integer, text, text, text, double precision, text,
                          text, text, text, jsonb, integer)
  to threadline_bots;
