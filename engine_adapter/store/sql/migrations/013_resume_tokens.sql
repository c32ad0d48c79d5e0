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


-- Resume links land on the ingress: it decides a gate for the holder of a valid token, through
-- the same code as the console (gates.decide). So the ingress may, besides starting runs, record
-- a decision, write a person's decision entry (nothing else of a person's) and release the gate,
-- each only for a gate whose token it has just used up (in the same transaction): without a
-- token, the ingress still decides nothing.
create function threadline.token_used_for (p_step_key text) returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select exists (select 1 from threadline.resume_tokens
                  where gate_key = p_step_key and used_at is not null);
$$;

create function threadline.decision_by_token () returns trigger
  language plpgsql
  set search_path = pg_catalog, pg_temp
as $$
begin
  if threadline.caller_kind() = 'hooks' and not threadline.token_used_for(new.step_key) then
    perform threadline.refuse(format('deciding gate %s without a resume token', new.step_key));
  end if;
  return new;
end;
$$;
create trigger decisions_by_token before insert on threadline.decisions
  for each row execute function threadline.decision_by_token();
create or replace function threadline.append_entry (
  p_run_id uuid, p_author_kind text, p_author text, p_kind text,
  p_step_key text, p_dedupe_key text, p_text text, p_data jsonb
)
  returns integer
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  v_seq integer;
  v_bot text;
  v_caller text := threadline.caller_kind();
begin
  if not (v_caller = 'owner'
          or (v_caller = 'bots' and p_author_kind = 'bot')
          or (v_caller in ('conductor', 'hooks') and p_author_kind = 'system')
          or (v_caller = 'hooks' and p_author_kind = 'human' and p_kind = 'decision'
              and threadline.token_used_for(p_step_key))
          or (v_caller = 'console' and p_author_kind in ('human', 'system'))) then
    perform threadline.refuse(format('writing a %s entry', p_author_kind));
  end if;
  select next_seq, bot into v_seq, v_bot
    from threadline.run_threads where run_id = p_run_id for update;
  if v_seq is null then
    raise exception 'run % not found', p_run_id using errcode = 'P0002';
  end if;
  if p_author_kind = 'bot' and p_author <> v_bot then
    raise exception 'bot "%" may not write to run %: its thread is bound to bot "%"',
      p_author, p_run_id, v_bot using errcode = 'P0001';
  end if;
  if p_dedupe_key is not null and exists (
    select 1 from threadline.thread_entries where run_id = p_run_id and dedupe_key = p_dedupe_key
  ) then
    return null;
  end if;
  insert into threadline.thread_entries
    (run_id, seq, author_kind, author, kind, step_key, dedupe_key, text, data)
  values (p_run_id, v_seq, p_author_kind, p_author, p_kind, p_step_key, p_dedupe_key, p_text, p_data);
  update threadline.run_threads set next_seq = v_seq + 1, updated_at = now() where run_id = p_run_id;
  return v_seq;
end;
$$;

create or replace function threadline.emit_step_done (p_queue text, p_run_id uuid, p_step_key text,
                                           p_payload jsonb)
  returns void
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  v_caller text := threadline.caller_kind();
  v_run record;
begin
  if v_caller not in ('owner', 'conductor') then
    select await_key, await_kind into v_run from threadline.run_threads where run_id = p_run_id;
    if v_run.await_key is distinct from p_step_key
       or (v_caller = 'bots' and v_run.await_kind is distinct from 'bot')
       or (v_caller in ('console', 'hooks') and (v_run.await_kind is distinct from 'gate'
           or not exists (select 1 from threadline.decisions where step_key = p_step_key)))
       or (v_caller = 'hooks' and not threadline.token_used_for(p_step_key))
       or v_caller not in ('bots', 'console', 'hooks') then
      perform threadline.refuse(format('releasing step %s', p_step_key));
    end if;
  end if;
  perform absurd.emit_event(p_queue, 'threadline.step.done:' || p_step_key, p_payload);
  update threadline.run_threads
     set awaiting = false, last_emitted_key = p_step_key, updated_at = now()
   where run_id = p_run_id and await_key = p_step_key and awaiting;
  perform pg_notify('threadline', 'step.done:' || p_run_id);
end;
$$;

grant update (updated_at) on threadline.run_threads to threadline_hooks;  -- row locks only
grant select, insert on threadline.decisions to threadline_hooks;  -- insert ... returning
grant select, update (used_at) on threadline.resume_tokens to threadline_hooks;
grant insert on threadline.decision_audit to threadline_hooks;
grant usage on sequence threadline.decision_audit_id_seq to threadline_hooks;
