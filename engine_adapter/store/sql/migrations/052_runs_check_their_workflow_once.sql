-- A run's workflow is checked when the run is written with it, not at every step.
--
-- Postgres checks a foreign key again on an update that leaves the key as it was when the row's
-- old version is the updating transaction's own: a run's row updated twice in one transaction
-- (a SEND: its entry's sequence number, then the run armed; a report: two entries, then the run
-- disarmed) locked its workflow's row FOR KEY SHARE each time. Every run of a workflow shares
-- that one row, so concurrent steps of its runs made it a multixact of all their transactions,
-- rewritten (with a WAL record) by each: about eight per three-step run, and a point every
-- conductor and bot process of a busy workflow contends on.
--
-- The key is now checked by triggers with the same outcome: a run is written only with a
-- workflow that exists (locked FOR KEY SHARE until its transaction ends, as the constraint's
-- check did), on insert and on an update that sets the workflow; and a workflow with runs can
-- neither be deleted nor renamed (the delete's or rename's lock waits for a run being written,
-- and its check then sees it).
alter table threadline.run_threads drop constraint run_threads_workflow_fkey;

create function threadline.run_workflow_exists () returns trigger
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  perform 1 from threadline.workflows w where w.slug = new.workflow for key share;
  if not found then
    raise exception 'run %: workflow "%" does not exist', new.run_id, new.workflow
      using errcode = 'foreign_key_violation', table = 'run_threads',
            constraint = 'run_threads_workflow_fkey';
  end if;
  return new;
end;
$$;
revoke all on function threadline.run_workflow_exists () from public;

create trigger run_threads_workflow_exists
  before insert or update of workflow on threadline.run_threads
  for each row execute function threadline.run_workflow_exists();

create function threadline.workflow_without_runs () returns trigger
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  if tg_op = 'UPDATE' and new.slug = old.slug then
    return new;
  end if;
  if exists (select 1 from threadline.run_threads r where r.workflow = old.slug) then
    raise exception 'workflow "%" has runs: it cannot be %', old.slug,
      case tg_op when 'DELETE' then 'deleted' else 'renamed' end
      using errcode = 'foreign_key_violation', table = 'workflows',
            constraint = 'run_threads_workflow_fkey';
  end if;
  return case tg_op when 'DELETE' then old else new end;
end;
$$;
revoke all on function threadline.workflow_without_runs () from public;

create trigger workflows_without_runs
  before delete or update of slug on threadline.workflows
  for each row execute function threadline.workflow_without_runs();
