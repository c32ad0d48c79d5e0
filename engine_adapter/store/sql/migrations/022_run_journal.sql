-- Threadline owns its runs' history: every checkpoint the one workflow handler writes (a step's
-- result with its attempt and timings, a decision, a branch taken) is copied into
-- threadline.run_journal by the database, in the same transaction as the engine's write. The run
-- page, `show` and the notebooks read this copy, so they survive any cleanup of the engine's
-- tables (`absurdctl cleanup`, absurd.cleanup_tasks), which deletes checkpoints; a delete is
-- never copied. Only Threadline's retention (`threadline cleanup`) removes a run's journal.
create table threadline.run_journal (
  run_id     uuid not null,
  name       text not null,  -- the checkpoint's name (names.py builds and parses them)
  state      jsonb,
  status     text not null,
  written_at timestamptz not null,
  primary key (run_id, name)
);

create function threadline.keep_journal () returns trigger
  language plpgsql security definer set search_path = pg_catalog, pg_temp
as $$
begin
  insert into threadline.run_journal (run_id, name, state, status, written_at)
  values (new.task_id, new.checkpoint_name, new.state, new.status, new.updated_at)
  on conflict (run_id, name) do update
     set state = excluded.state, status = excluded.status, written_at = excluded.written_at;
  return null;
end;
$$;

create trigger c_threadline_keep_journal after insert or update on absurd.c_threadline
  for each row execute function threadline.keep_journal();

insert into threadline.run_journal (run_id, name, state, status, written_at)
select task_id, checkpoint_name, state, status, updated_at from absurd.c_threadline
on conflict do nothing;

grant select on threadline.run_journal to threadline_conductor, threadline_hooks,
  threadline_console, threadline_viewer;
