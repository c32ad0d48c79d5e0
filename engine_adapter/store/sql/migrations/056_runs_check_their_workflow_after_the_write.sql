-- A run's workflow is checked after the run's row is written, so an update locks no row first.
--
-- Postgres locks a row before updating it whenever its table has a BEFORE UPDATE row trigger,
-- whichever columns the trigger names: it fetches the row for the trigger under a tuple lock,
-- a WAL record of its own, and only then sees that the update leaves the trigger's column alone.
-- Migration 052's check of the workflow was such a trigger (BEFORE ... UPDATE OF workflow), so
-- every update of a run's row (each thread entry's sequence number, each step armed and
-- disarmed, each change of state) wrote a row lock and then the update: about eleven lock
-- records per three-step workflow.
--
-- The same check as an AFTER trigger has the same outcome: the statement that writes a run with
-- a workflow that does not exist fails, and the workflow's row is locked FOR KEY SHARE until the
-- run's transaction ends (the run's row is written first; a delete or rename of the workflow
-- that takes its lock in between finds the run invisible and goes on, and the check then finds
-- no workflow and fails the run's statement, as the constraint did). An AFTER trigger fires for
-- an update only when the update sets the workflow column, and takes no lock before it.
drop trigger run_threads_workflow_exists on threadline.run_threads;

create trigger run_threads_workflow_exists
  after insert or update of workflow on threadline.run_threads
  for each row execute function threadline.run_workflow_exists();
