-- insert_resume_token --
-- A new resume token's hash, bound to a run's open gate and the subject it decides as (migration
-- 044: the conductor's only for the subject of a notification queued for that gate).
select threadline.issue_resume_token(%(token_hash)s, %(run_id)s, %(gate_key)s, %(subject)s,
                                     %(via)s, %(ttl_s)s) as expires_at

-- use_resume_token --
-- A presented token, hashed, locked, checked and (unless refused) marked used by this transaction
-- (migration 032): its run, gate and subject, and why it was refused.
select refusal, run_id, gate_key, subject, expires_at, used_at
  from threadline.use_resume_token(%(token)s, %(run_id)s::uuid)

-- insert_decision_audit --
-- One decision attempt, decided or refused, through threadline.audit_decision (migration 032).
select threadline.audit_decision(jsonb_build_object(
  'run_id', %(run_id)s::uuid, 'gate_key', %(gate_key)s::text, 'actor', %(actor)s::text,
  'via', %(via)s::text, 'decision', %(decision)s::text, 'reason', %(reason)s::text,
  'outcome', %(outcome)s::text, 'why', %(why)s::text, 'account_id', %(account_id)s::bigint,
  'minted_by', %(minted_by)s::text))

-- decision_audit_of_run --
select run_id, gate_key, actor, via, decision, reason, outcome, why, minted_by, created_at
  from threadline.decision_audit where run_id = %(run_id)s order by id

-- gate_question --
-- The question of the gate a run waits at: what an envelope's requires_approval shows.
select q.text as prompt, q.data ->> 'deadline' as deadline
  from threadline.thread_entries q
 where q.run_id = %(run_id)s and q.dedupe_key = 'question:' || %(gate_key)s
