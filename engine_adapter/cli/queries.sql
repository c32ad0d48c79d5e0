-- The named queries of engine_adapter.cli: a block is `-- name --`, a comment line, then
-- the query (store/db.py loads every part's queries.sql; a name is unique across them).

-- gate_question --
-- The question of the gate a run waits at: what an envelope's requires_approval shows.
select q.text as prompt, q.data ->> 'deadline' as deadline
  from threadline.thread_entries q
 where q.run_id = %(run_id)s and q.dedupe_key = 'question:' || %(gate_key)s
