-- A run's count moves without a query of its own.
--
-- count_runs ordered the one or two counts it moves (taken off, put on) with a sorting query over
-- text arrays, and cast each back from text: a tenth of a spawn's server time went to the
-- trigger. The order is now one row comparison, the values keep their types, and the update (or
-- the first insert of its kind) is written once, for each count in turn. Same counts, same order
-- (no deadlock between transactions moving runs in opposite directions).

-- Migration 058's function, so changed.
create or replace function threadline.count_runs ()
  returns trigger
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
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
