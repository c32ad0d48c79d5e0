-- Resume tokens: a credential that decides one open gate, once. A door hands the token out (the
-- envelope CLI's needs_approval answer; later a notification's link); only its sha256 is kept,
-- so a copy of the database decides nothing. A token is bound to its run and gate key (so to the
-- gate's try), acts as the subject it was issued for, and expires.
create table threadline.resume_tokens (
  token_hash  text primary key,
  run_id      uuid not null references threadline.run_threads (run_id),
  gate_key    text not null,
  subject     text not null,   -- who a decision by this token is made as
  issued_via  text not null,
  created_at  timestamptz not null default now(),
  expires_at  timestamptz not null,
  used_at     timestamptz
);
create index resume_tokens_gate on threadline.resume_tokens (gate_key);

-- Every decision attempt made with a credential other than a session, refused ones included:
-- who, how, when, what, and why it was refused.
create table threadline.decision_audit (
  id          bigserial primary key,
  run_id      uuid,
  gate_key    text,
  actor       text,
  via         text not null,
  decision    text not null,
  reason      text,
  outcome     text not null check (outcome in ('decided', 'refused')),
  why         text,
  created_at  timestamptz not null default now()
);
create index decision_audit_run on threadline.decision_audit (run_id, created_at);

grant select, insert on threadline.resume_tokens, threadline.decision_audit
  to threadline_console;
grant update (used_at) on threadline.resume_tokens to threadline_console;
grant usage on sequence threadline.decision_audit_id_seq to threadline_console;
grant select on threadline.decision_audit to threadline_viewer;
