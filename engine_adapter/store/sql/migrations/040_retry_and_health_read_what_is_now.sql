-- A retried run takes its bot's settings as they are now (`threadline bot apply` after a failure
-- is how a person fixes a bad model URL or a missing agent bot): the console's role, the door
-- `threadline retry` comes through, reads them with the same function a new run's spawn does.
grant execute on function threadline.agent_snapshot (text) to threadline_console;

-- A process that stops cleanly says so (workers.Worker.close): `threadline health` reads it as
-- stopped, and keeps "DEAD" for one that vanished without a word (killed, crashed, lost).
alter table threadline.workers add column stopped_at timestamptz;
