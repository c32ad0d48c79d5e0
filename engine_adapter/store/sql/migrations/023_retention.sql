-- Retention: Threadline cleans up after itself. A finished top-level run older than its
-- workflow's `retention.runs` (else the global default) goes with its child runs, its thread,
-- claims, decisions, tokens, waits, notifications, webhook deliveries and journal, and with the
-- engine's rows of every one of those runs (task, attempts, checkpoints, waits), in one
-- transaction per batch. Streamed command output (bot progress entries) goes sooner, after
-- `retention.output`. Decision audits are kept: they are the record of who decided what.

-- The global defaults (`threadline retention set runs|output DURATION`).
create table threadline.retention_defaults (
  only_row   boolean primary key default true check (only_row),
  runs_s     integer not null check (runs_s >= 3600),
  output_s   integer not null check (output_s >= 3600),
  set_by     text not null,
  set_at     timestamptz not null default now(),
  check (output_s <= runs_s)
);
insert into threadline.retention_defaults (runs_s, output_s, set_by)
values (180 * 86400, 30 * 86400, 'threadline');

-- What each cleanup did (the console's Conductors page shows the last one).
create table threadline.cleanups (
  id              bigserial primary key,
  started_at      timestamptz not null default now(),
  finished_at     timestamptz,
  by_worker       text not null,
  runs_removed    integer not null default 0,
  outputs_removed integer not null default 0,  -- streamed output entries
  events_removed  integer not null default 0,  -- the engine's emitted events
  workers_removed integer not null default 0,
  error           text
);

grant select on threadline.retention_defaults, threadline.cleanups to threadline_conductor,
  threadline_console, threadline_viewer;
grant insert, update on threadline.cleanups to threadline_conductor, threadline_console;
grant update on threadline.retention_defaults to threadline_console;
grant usage on sequence threadline.cleanups_id_seq to threadline_conductor, threadline_console;

-- Delete whole runs (each with its child runs, recursively) and the engine's rows of each.
-- Returns how many top-level runs went (their child runs with them). Only finished top-level runs are taken; a run
-- any of whose rows a live writer holds is skipped (left for the next cleanup), never waited for.
create function threadline.delete_runs (p_run_ids uuid[]) returns integer
  language plpgsql security definer set search_path = pg_catalog, pg_temp
as $$
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

-- Delete the streamed command output (bot progress entries) of the given finished runs.
create function threadline.delete_outputs (p_run_ids uuid[]) returns integer
  language plpgsql security definer set search_path = pg_catalog, pg_temp
as $$
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

-- The engine's emitted events older than the default run retention (Absurd's own cleanup
-- function), and processes dead for a day: for the conductor's job and `threadline cleanup`,
-- whose roles may not delete those rows themselves.
create function threadline.cleanup_engine_events (p_limit integer) returns integer
  language sql security definer set search_path = pg_catalog, pg_temp
as $$
  select absurd.cleanup_events('threadline', (select runs_s from threadline.retention_defaults),
                               p_limit);
$$;

create function threadline.prune_dead_workers () returns integer
  language plpgsql security definer set search_path = pg_catalog, pg_temp
as $$
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

revoke execute on function threadline.cleanup_engine_events (integer) from public;
revoke execute on function threadline.prune_dead_workers () from public;
grant execute on function threadline.cleanup_engine_events (integer) to threadline_conductor,
  threadline_console;
grant execute on function threadline.prune_dead_workers () to threadline_conductor,
  threadline_console;
revoke execute on function threadline.delete_runs (uuid[]) from public;
revoke execute on function threadline.delete_outputs (uuid[]) from public;
grant execute on function threadline.delete_runs (uuid[]) to threadline_conductor,
  threadline_console;
grant execute on function threadline.delete_outputs (uuid[]) to threadline_conductor,
  threadline_console;

create index run_threads_finished_top on threadline.run_threads (finished_at)
  where parent_run_id is null and state in ('completed', 'failed', 'cancelled');
