-- The change feed the console listens to: every change to a run, its attempts or the set of
-- workers and workflows is announced on its own channel, from the database itself, so no
-- writer can forget to and conductors (which listen on "threadline") are not woken by it.
-- Payload: "<table>:<run id or empty>"; Postgres folds repeats within one transaction.

create function threadline.announce_change () returns trigger
  language plpgsql
as $$
declare
  v_row jsonb := to_jsonb(coalesce(new, old));
begin
  perform pg_notify('threadline_changes', tg_table_name || ':' || coalesce(v_row ->> 'run_id', ''));
  return null;
end;
$$;

create trigger run_threads_announce after insert or update on threadline.run_threads
  for each row execute function threadline.announce_change();
create trigger step_claims_announce after insert or update on threadline.step_claims
  for each row execute function threadline.announce_change();
create trigger decisions_announce after insert on threadline.decisions
  for each row execute function threadline.announce_change();
-- Heartbeats are not announced (one a second per worker); the console reads liveness itself.
create trigger workers_announce after insert or delete on threadline.workers
  for each row execute function threadline.announce_change();
create trigger workflows_announce after insert or update on threadline.workflows
  for each row execute function threadline.announce_change();

-- The console's charts read recent attempts by time.
create index step_claims_started on threadline.step_claims (started_at desc);
