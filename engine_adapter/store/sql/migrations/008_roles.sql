-- Least-privilege database roles: one per process kind, each with only the grants it needs.
-- `threadline db migrate` (the owner) creates them and gives them a login; no other process runs
-- as the owner or a superuser. Writes that cross a boundary go through the security-definer
-- functions below, which check which kind of process is calling:
--   * a step's done event: a bot may release only a bot step; a human door (console, CLI) only
--     a gate it has recorded a decision for;
--   * a thread entry: a bot writes only as its bot, the conductor and the ingress only as System;
--   * a retry and a hand-emitted (debug) event: human doors only, never Threadline's own events.
-- The conductor is the engine's worker and keeps full access to Absurd's tables.

do $$
declare
  v_role text;
begin
  foreach v_role in array array['threadline_conductor', 'threadline_bots', 'threadline_console',
                                'threadline_hooks', 'threadline_viewer'] loop
    if not exists (select 1 from pg_roles where rolname = v_role) then
      execute format('create role %I nologin', v_role);
    end if;
  end loop;
end;
$$;

-- Which kind of process is calling: 'owner' (a superuser or the owner of schema threadline),
-- the kind whose role the session logged in as, or 'other'. session_user, not current_user:
-- inside a security-definer function current_user is the function's owner.
create function threadline.caller_kind () returns text
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
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

create function threadline.refuse (p_what text) returns void
  language plpgsql
as $$
begin
  raise exception '% is not allowed for % processes', p_what, threadline.caller_kind()
    using errcode = 'insufficient_privilege';
end;
$$;

-- Refuse unless the caller is the owner or one of p_kinds.
create function threadline.require_caller (p_kinds text[], p_what text) returns void
  language plpgsql
as $$
begin
  if threadline.caller_kind() <> all (array_append(p_kinds, 'owner')) then
    perform threadline.refuse(p_what);
  end if;
end;
$$;

-- Thread entries are appended only through append_entry (no role may insert them directly).
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
  v_caller text := threadline.caller_kind();
begin
  if not (v_caller = 'owner'
          or (v_caller = 'bots' and p_author_kind = 'bot')
          or (v_caller in ('conductor', 'hooks') and p_author_kind = 'system')
          or (v_caller = 'console' and p_author_kind in ('human', 'system'))) then
    perform threadline.refuse(format('writing a %s entry', p_author_kind));
  end if;
  select next_seq, bot into v_seq, v_bot
    from threadline.run_threads where run_id = p_run_id for update;
  if v_seq is null then
    raise exception 'run % not found', p_run_id using errcode = 'P0002';
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

-- A step's done event, and `awaiting` cleared with a compare-and-set on the key. A bot may
-- release only the bot step the run awaits; a human door only the gate the run awaits, once
-- its decision is recorded; the conductor (reconcile sweep, gate timeouts) any step.
create function threadline.emit_step_done (p_queue text, p_run_id uuid, p_step_key text,
                                           p_payload jsonb)
  returns void
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  v_caller text := threadline.caller_kind();
  v_run record;
begin
  if v_caller not in ('owner', 'conductor') then
    select await_key, await_kind into v_run from threadline.run_threads where run_id = p_run_id;
    if v_run.await_key is distinct from p_step_key
       or (v_caller = 'bots' and v_run.await_kind is distinct from 'bot')
       or (v_caller = 'console' and (v_run.await_kind is distinct from 'gate' or not exists (
             select 1 from threadline.decisions where step_key = p_step_key)))
       or v_caller not in ('bots', 'console') then
      perform threadline.refuse(format('releasing step %s', p_step_key));
    end if;
  end if;
  perform absurd.emit_event(p_queue, 'threadline.step.done:' || p_step_key, p_payload);
  update threadline.run_threads
     set awaiting = false, last_emitted_key = p_step_key, updated_at = now()
   where run_id = p_run_id and await_key = p_step_key and awaiting;
  perform pg_notify('threadline', 'step.done:' || p_run_id);
end;
$$;

-- `threadline retry`: the failed run's retry event. Human doors only, and only for the step
-- the failed run stopped at.
create function threadline.emit_retry (p_queue text, p_run_id uuid, p_step_key text,
                                       p_payload jsonb)
  returns void
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
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

-- The debug pane's hand-emitted event: human doors only, and never one of Threadline's own
-- (a step done, a retry, an admission), which only their checked paths may emit.
create function threadline.emit_debug_event (p_queue text, p_event text, p_payload jsonb)
  returns void
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  perform threadline.require_caller(array['console'], 'emitting an event by hand');
  if lower(btrim(p_event)) like 'threadline.%' then
    raise exception 'event "%" is Threadline''s own: it is emitted only by its checked paths', p_event
      using errcode = 'insufficient_privilege';
  end if;
  perform absurd.emit_event(p_queue, p_event, p_payload);
end;
$$;

-- Spawning doors (the ingress, the console, the conductor's schedules) queue and admit runs
-- without write access to run states or events.
alter function threadline.queue_run (uuid, text)
  security definer set search_path = pg_catalog, pg_temp;
alter function threadline.admit_queued (text, text)
  security definer set search_path = pg_catalog, pg_temp;

-- Functions are executable by PUBLIC by default; the checked ones check their caller, the rest
-- act with the caller's own table privileges.
grant usage on schema threadline, absurd to threadline_conductor, threadline_bots,
  threadline_console, threadline_hooks, threadline_viewer;

-- viewer: people reading; nothing written.
grant select on all tables in schema threadline, absurd to threadline_viewer;

-- conductor: the engine's worker.
grant select, insert, update, delete on all tables in schema absurd to threadline_conductor;
grant select on all tables in schema threadline to threadline_conductor;
grant insert, update on threadline.run_threads, threadline.schedule_ticks to threadline_conductor;
grant insert on threadline.decisions to threadline_conductor;
grant update on threadline.workflows to threadline_conductor;  -- schedule ticks lock the row
grant insert, update, delete on threadline.workers to threadline_conductor;
grant usage on all sequences in schema threadline to threadline_conductor;

-- bots: claim, heartbeat, report; no access to Absurd (events go through emit_step_done).
grant select on threadline.run_threads, threadline.thread_entries, threadline.step_claims,
  threadline.workers, threadline.live_workers, threadline.webhook_triggers to threadline_bots;
grant update (updated_at) on threadline.run_threads to threadline_bots;  -- row locks only
grant insert, update on threadline.step_claims to threadline_bots;
grant insert, update on threadline.workers to threadline_bots;
grant usage on sequence threadline.worker_lock_keys to threadline_bots;

-- hooks (the webhook ingress): spawn runs; nothing else.
grant select on threadline.workflows, threadline.webhook_triggers, threadline.webhook_deliveries,
  threadline.run_threads to threadline_hooks;
grant insert on threadline.run_threads, threadline.webhook_deliveries to threadline_hooks;
grant select on absurd.queues to threadline_hooks;
grant select, insert on absurd.t_threadline, absurd.r_threadline to threadline_hooks;

-- console (and the CLI): people's doors. Reads everything; writes recipes, spawns, replies,
-- decisions, cancel and retry. Events only through the checked functions above.
grant select on all tables in schema threadline, absurd to threadline_console;
grant insert, update on threadline.workflows, threadline.workflow_versions to threadline_console;
grant insert, delete on threadline.webhook_triggers to threadline_console;  -- kept by a trigger
grant insert, update on threadline.run_threads to threadline_console;
grant insert on threadline.decisions to threadline_console;
grant insert, update, delete on absurd.t_threadline, absurd.r_threadline, absurd.w_threadline
  to threadline_console;  -- spawn, cancel, retry
grant usage on all sequences in schema threadline to threadline_console;
