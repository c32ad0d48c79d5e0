-- insert_resume_token --
-- A new resume token's hash, bound to a run's open gate and the subject it decides as.
insert into threadline.resume_tokens (token_hash, run_id, gate_key, subject, issued_via, expires_at)
values (%(token_hash)s, %(run_id)s, %(gate_key)s, %(subject)s, %(via)s,
        now() + make_interval(secs => %(ttl_s)s))
returning expires_at

-- lock_resume_token --
-- A presented token's row (by its hash), locked: two uses of one token are serialised.
select token_hash, run_id, gate_key, subject, issued_via, expires_at, used_at,
       expires_at <= now() as expired
  from threadline.resume_tokens where token_hash = %(token_hash)s
   for update

-- use_resume_token --
update threadline.resume_tokens set used_at = now() where token_hash = %(token_hash)s

-- insert_decision_audit --
-- One decision attempt, decided or refused.
insert into threadline.decision_audit
  (run_id, gate_key, actor, via, decision, reason, outcome, why, account_id, minted_by)
values (%(run_id)s, %(gate_key)s, %(actor)s, %(via)s, %(decision)s, %(reason)s, %(outcome)s,
        %(why)s, %(account_id)s, %(minted_by)s)

-- decision_audit_of_run --
select run_id, gate_key, actor, via, decision, reason, outcome, why, minted_by, created_at
  from threadline.decision_audit where run_id = %(run_id)s order by id

-- gate_question --
-- The question of the gate a run waits at: what an envelope's requires_approval shows.
select q.text as prompt, q.data ->> 'deadline' as deadline
  from threadline.thread_entries q
 where q.run_id = %(run_id)s and q.dedupe_key = 'question:' || %(gate_key)s
