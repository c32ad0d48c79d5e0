-- The kept run counts (migration 026) follow every column that decides where a run is counted:
-- whether the runs page lists it (its parent, and what its trigger says it is to that parent),
-- its state and failed step, its workflow and its day. Before, only a change of state or step
-- moved a count: a run made a branch after it was written (as set_run_parent once did) stayed
-- counted as a top-level run, and a run moved to another day (or workflow) stayed counted at
-- the old one. Now the statement that makes a run listed or not moves its count too, in the same
-- transaction, whatever writes it.

create or replace function threadline.count_runs ()
  returns trigger
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  v_shard smallint := pg_backend_pid() % 16;
  v_old text[];
  v_new text[];
  v_row text[];
begin
  -- (day, workflow, state, step) taken off and put on, each from its own row version; in a fixed
  -- order, so two transactions moving runs in opposite directions (failed -> running by a retry,
  -- running -> failed) never deadlock. Listed as the runs page lists runs: top-level runs and
  -- sub-workflows; parallel branches and foreach items are in their parent.
  if tg_op <> 'INSERT' and (old.parent_run_id is null or old.trigger ->> 'what' = 'sub-workflow') then
    v_old := array[threadline.run_day(old.created_at)::text, old.workflow, old.state,
                   case when old.state = 'failed' then coalesce(old.current_step, '') else '' end];
  end if;
  if tg_op <> 'DELETE' and (new.parent_run_id is null or new.trigger ->> 'what' = 'sub-workflow') then
    v_new := array[threadline.run_day(new.created_at)::text, new.workflow, new.state,
                   case when new.state = 'failed' then coalesce(new.current_step, '') else '' end];
  end if;
  if v_old is not distinct from v_new then  -- nothing counted moved (or a run never listed)
    return null;
  end if;
  foreach v_row slice 1 in array (
    select array_agg(array[x.day, x.workflow, x.state, x.step, x.delta::text]
                     order by x.day::timestamptz, x.workflow, x.state, x.step)
      from (values (v_old[1], v_old[2], v_old[3], v_old[4], -1),
                   (v_new[1], v_new[2], v_new[3], v_new[4], 1)) x (day, workflow, state, step, delta)
     where x.state is not null)
  loop
    insert into threadline.run_counts as c (day, workflow, state, step, shard, runs)
    values (v_row[1]::timestamptz, v_row[2], v_row[3], v_row[4], v_shard, v_row[5]::integer)
    on conflict (day, workflow, state, step, shard)
    do update set runs = c.runs + excluded.runs;
  end loop;
  return null;
end;
$$;

-- (The day travels as text between the arrays above: written and read back in this function's
-- own session, so its time zone cannot shift it.)

drop trigger run_threads_count_moves on threadline.run_threads;
create trigger run_threads_count_moves
  after update of state, current_step, parent_run_id, trigger, workflow, created_at
  on threadline.run_threads
  for each row
  when (old.state is distinct from new.state
        or (new.state = 'failed' and old.current_step is distinct from new.current_step)
        or old.parent_run_id is distinct from new.parent_run_id
        or old.trigger ->> 'what' is distinct from new.trigger ->> 'what'
        or old.workflow is distinct from new.workflow
        or old.created_at is distinct from new.created_at)
  execute function threadline.count_runs();

-- Counts a change of these columns left behind before this migration: every kept count
-- recounted from the runs themselves, in one row per (day, workflow, state, step).
lock table threadline.run_threads in share mode;
delete from threadline.run_counts;
insert into threadline.run_counts (day, workflow, state, step, shard, runs)
select threadline.run_day(created_at), workflow, state,
       case when state = 'failed' then coalesce(current_step, '') else '' end, 0, count(*)
  from threadline.run_threads
 where parent_run_id is null or trigger ->> 'what' = 'sub-workflow'
 group by 1, 2, 3, 4;
