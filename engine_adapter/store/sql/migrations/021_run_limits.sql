-- Concurrency caps besides a workflow's own max_concurrent_runs: one over all runs (global) and
-- one per initiator (who started a run: the person or token of a manual run, "schedule", a
-- webhook's caller). Only top-level runs count and wait: a branch or sub-workflow run holds its
-- parent's place. While any cap exists, every new top-level run is queued and admitted in line
-- (migration 002's queue), by admit_all, under one admission lock.
create table threadline.run_limits (
  kind     text not null check (kind in ('global', 'initiator')),
  name     text not null default '',
  max_runs integer not null check (max_runs > 0),
  set_by   text not null,
  set_at   timestamptz not null default now(),
  primary key (kind, name),
  check ((kind = 'global') = (name = ''))
);

grant select on threadline.run_limits to threadline_conductor, threadline_hooks,
  threadline_console, threadline_viewer;
grant insert, update, delete on threadline.run_limits to threadline_console;

-- Who started a run, as its caps count it: the trigger's caller, else the trigger's kind.
alter table threadline.run_threads add column initiator text;
update threadline.run_threads set initiator = coalesce(trigger ->> 'caller', trigger ->> 'kind')
 where parent_run_id is null;
create index run_threads_active_top on threadline.run_threads (initiator)
  where parent_run_id is null and admitted_at is not null
    and state not in ('completed', 'failed', 'cancelled');

-- With caps, admissions of different workflows decide over the same runs: one lock serialises
-- them all (taken before the workflow's, so two admitting transactions never wait on each other
-- in a cycle). Without caps, a lock per workflow, as before.
create or replace function threadline.lock_admission (p_workflow text) returns void
  language plpgsql
as $$
begin
  if exists (select 1 from threadline.run_limits) then
    perform pg_advisory_xact_lock(7413, 0);
  end if;
  perform pg_advisory_xact_lock(7412, hashtext(p_workflow));
end;
$$;

-- Top-level runs holding a place: all of them, or one initiator's.
create function threadline.active_top_runs (p_initiator text) returns integer
  language sql stable
as $$
  select count(*)::integer from threadline.run_threads
   where parent_run_id is null and admitted_at is not null
     and state not in ('completed', 'failed', 'cancelled')
     and (p_initiator is null or initiator = p_initiator);
$$;

-- Admit one queued run: it leaves `queued`, gets its admission event (its handler awaits it,
-- holding no process) and, if it had to wait, a thread note. False if it was cancelled meanwhile.
create function threadline.admit_run (p_queue text, p_run_id uuid, p_note text) returns boolean
  language plpgsql
as $$
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
  perform pg_notify('threadline', 'admitted:' || p_run_id);
  return true;
end;
$$;

-- Admit queued runs in line while every cap that applies has room: the global cap stops the
-- line; a run over its workflow's or its initiator's cap waits and the runs behind it of other
-- workflows and initiators go ahead (so one busy initiator never holds up the others).
create function threadline.admit_all (p_queue text) returns integer
  language plpgsql
as $$
declare
  v_global integer;
  v_cap integer;
  v_run record;
  v_admitted integer := 0;
begin
  if not exists (select 1 from threadline.run_threads where state = 'queued') then
    return 0;
  end if;
  select max_runs into v_global from threadline.run_limits where kind = 'global';
  for v_run in
    select run_id, workflow, initiator from threadline.run_threads
     where state = 'queued' order by queue_seq for update
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

-- Admit a workflow's queued runs: by admit_all while caps exist, else in the workflow's own line
-- up to its max_concurrent_runs (migration 002's rule, unchanged).
create or replace function threadline.admit_queued (p_queue text, p_workflow text)
  returns integer
  language plpgsql
as $$
declare
  v_max integer;
  v_run record;
  v_admitted integer := 0;
begin
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
     for update
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

alter function threadline.lock_admission (text)
  security definer set search_path = pg_catalog, pg_temp;
alter function threadline.admit_queued (text, text)
  security definer set search_path = pg_catalog, pg_temp;
alter function threadline.admit_all (text)
  security definer set search_path = pg_catalog, pg_temp;
alter function threadline.admit_run (text, uuid, text)
  security definer set search_path = pg_catalog, pg_temp;
-- Admitting one run skips every cap: only the admitting functions above call it.
revoke execute on function threadline.admit_run (text, uuid, text) from public;
