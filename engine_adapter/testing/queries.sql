-- The named queries of engine_adapter.testing: a block is `-- name --`, a comment line, then
-- the query (store/db.py loads every part's queries.sql; a name is unique across them).

-- frame_schedule_slots --
-- A workflow's schedule slot rows, oldest first: each slot handled, the run it started, the slots it skipped.
select slot, run_id, skipped
  from threadline.schedule_ticks
 where workflow = %(workflow)s
 order by slot

-- get_decision --
-- The decision taken for one gate, if any.
select * from threadline.decisions where step_key = %(step_key)s

-- live_worker_by_pid --
-- Whether the process with this pid (on this host) holds its liveness lock, i.e. finished starting.
select exists (select 1 from threadline.live_workers
                where kind = %(kind)s and pid = %(pid)s and host = %(host)s) as alive
