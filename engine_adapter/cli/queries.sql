-- The named queries of engine_adapter.cli: a block is `-- name --`, a comment line, then
-- the query (store/db.py loads every part's queries.sql; a name is unique across them).

-- gate_question --
-- The question of the gate a run waits at: what an envelope's requires_approval shows.
select q.text as prompt, q.data ->> 'deadline' as deadline
  from threadline.thread_entries q
 where q.run_id = %(run_id)s and q.dedupe_key = 'question:' || %(gate_key)s

-- gate_below --
-- The first gate waiting in a run the given run started, or one those started (a parallel
-- branch, a foreach item, a sub-workflow): where a run followed by the contract pauses too.
select r.run_id
  from threadline.run_threads r join threadline.runs_below(%(run_id)s) b using (run_id)
 where r.awaiting and r.await_kind = 'gate' and r.state = 'waiting'
 order by r.updated_at, r.run_id
 limit 1
