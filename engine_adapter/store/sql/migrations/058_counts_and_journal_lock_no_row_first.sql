-- Run counts and the run journal are written without a row lock of their own.
--
-- Both were upserts (INSERT ... ON CONFLICT): an insert of a new row is speculative (a
-- confirmation record follows it in the WAL), and an insert that meets its row locks the row (a
-- WAL record of its own) before updating it. A count's row almost always exists (one per day,
-- workflow, state and shard), and a checkpoint's journal row almost never does, so each now
-- tries what it usually finds first:
-- - a count is an UPDATE, which locks its row with the write, and an upsert only when no row was
--   there (a race with another first writer still meets its row);
-- - a journal row is an UPDATE where the run's checkpoint was kept before (an attempt writing it
--   again), else a plain INSERT: the checkpoint's own row in absurd.c_threadline, written in the
--   same transaction, holds off any other writer of the same checkpoint until this commits.
-- About twelve WAL records per three-step workflow fewer.

-- Migration 037's function, its counts updated where their rows are.
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
    update threadline.run_counts c set runs = c.runs + v_row[5]::integer
     where (c.day, c.workflow, c.state, c.step, c.shard)
           = (v_row[1]::timestamptz, v_row[2], v_row[3], v_row[4], v_shard);
    if not found then  -- the first of its kind in this shard (or one writing it alongside)
      insert into threadline.run_counts as c (day, workflow, state, step, shard, runs)
      values (v_row[1]::timestamptz, v_row[2], v_row[3], v_row[4], v_shard, v_row[5]::integer)
      on conflict (day, workflow, state, step, shard)
      do update set runs = c.runs + excluded.runs;
    end if;
  end loop;
  return null;
end;
$$;

-- Migration 022's function: a new checkpoint is a plain insert.
create or replace function threadline.keep_journal () returns trigger
  language plpgsql security definer set search_path = pg_catalog, pg_temp
as $$
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
