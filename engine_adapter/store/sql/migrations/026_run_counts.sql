-- How many runs there are in each state, by day of creation and workflow (and, for failed runs,
-- the step they failed at): kept by triggers in the transaction that writes the run, so the runs
-- page's counts and charts read a few thousand rows instead of every run (at 1,000,000 runs a
-- count by state read 1,000,000 rows: 185 ms). Counted as the runs page lists them: top-level
-- runs and sub-workflows; parallel branches are in their parent.
--
-- Each backend adds to a shard of its own (its pid modulo 16), so conductors moving runs of one
-- workflow at the same moment do not queue on one row; a shard may go negative (a run counted in
-- one shard and moved on in another), only the sum means anything. The cleanup job folds the
-- shards of past days into one row (fold_run_counts).
create table threadline.run_counts (
  day      timestamptz not null,  -- the UTC day the runs were created
  workflow text not null,
  state    text not null,
  step     text not null default '',  -- a failed run's current step; '' for any other state
  shard    smallint not null,
  runs     integer not null,
  primary key (day, workflow, state, step, shard)
);

-- The day of a moment, as the charts bucket it (UTC days).
create function threadline.run_day (p_at timestamptz)
  returns timestamptz
  language sql
  immutable
as $$
  select date_bin('1 day', p_at, timestamptz '2000-01-01 00:00+00')
$$;

create function threadline.count_runs ()
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
  -- (state, step) taken off and put on; in a fixed order, so two transactions moving runs in
  -- opposite directions (failed -> running by a retry, running -> failed) never deadlock.
  if tg_op <> 'INSERT' and (old.parent_run_id is null or old.trigger ->> 'what' = 'sub-workflow') then
    v_old := array[old.state,
                   case when old.state = 'failed' then coalesce(old.current_step, '') else '' end];
  end if;
  if tg_op <> 'DELETE' and (new.parent_run_id is null or new.trigger ->> 'what' = 'sub-workflow') then
    v_new := array[new.state,
                   case when new.state = 'failed' then coalesce(new.current_step, '') else '' end];
  end if;
  if v_old is not distinct from v_new then  -- nothing counted moved (or a branch run)
    return null;
  end if;
  foreach v_row slice 1 in array (
    select array_agg(array[x.state, x.step, x.delta::text] order by x.state, x.step)
      from (values (v_old[1], v_old[2], -1), (v_new[1], v_new[2], 1)) x (state, step, delta)
     where x.state is not null)
  loop
    insert into threadline.run_counts as c (day, workflow, state, step, shard, runs)
    values (threadline.run_day(coalesce(new.created_at, old.created_at)),
            coalesce(new.workflow, old.workflow), v_row[1], v_row[2], v_shard, v_row[3]::integer)
    on conflict (day, workflow, state, step, shard)
    do update set runs = c.runs + excluded.runs;
  end loop;
  return null;
end;
$$;

create trigger run_threads_count after insert or delete on threadline.run_threads
  for each row execute function threadline.count_runs();
create trigger run_threads_count_moves after update of state, current_step
  on threadline.run_threads
  for each row
  when (old.state is distinct from new.state
        or (new.state = 'failed' and old.current_step is distinct from new.current_step))
  execute function threadline.count_runs();

-- The runs already written.
insert into threadline.run_counts (day, workflow, state, step, shard, runs)
select threadline.run_day(created_at), workflow, state,
       case when state = 'failed' then coalesce(current_step, '') else '' end, 0, count(*)
  from threadline.run_threads
 where parent_run_id is null or trigger ->> 'what' = 'sub-workflow'
 group by 1, 2, 3, 4;

-- The shards of days before today folded into one row each (rows that sum to nothing go): the
-- counts read fewer rows. Returns the rows removed.
create function threadline.fold_run_counts ()
  returns integer
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
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
revoke execute on function threadline.fold_run_counts () from public;
grant execute on function threadline.fold_run_counts () to threadline_conductor, threadline_console;

grant select on threadline.run_counts to threadline_conductor, threadline_console,
                                         threadline_viewer;
