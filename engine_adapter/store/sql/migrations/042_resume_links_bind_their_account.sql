-- A resume link decides as the account it was issued to, never as whoever holds that name later:
-- a token records its subject's live account when it is issued (a trigger sets it, whatever the
-- issuer wrote), and once that account is removed the token is refused, even after the same name
-- is added again (a new account, whose links are its own). A token issued for a name with no
-- account records none and, as before, decides as that name's account once one exists.
alter table threadline.resume_tokens add column subject_account bigint references threadline.accounts (id);

create function threadline.resume_token_subject_account () returns trigger
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  new.subject_account := (select a.id from threadline.accounts a
                           where a.name = new.subject and a.removed_at is null);
  return new;
end;
$$;
revoke all on function threadline.resume_token_subject_account () from public;

create trigger resume_tokens_subject_account before insert on threadline.resume_tokens
  for each row execute function threadline.resume_token_subject_account();

-- Migration 032's use_resume_token, refusing ('account removed') a token whose account is gone.
create or replace function threadline.use_resume_token (p_token text, p_run_id uuid)
  returns table (refusal text, run_id uuid, gate_key text, subject text,
                 expires_at timestamptz, used_at timestamptz)
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  v_token threadline.resume_tokens;
  v_refusal text;
begin
  perform threadline.require_caller(array['console', 'hooks'], 'using a resume token');
  select * into v_token from threadline.resume_tokens t
   where t.token_hash = encode(sha256(convert_to(p_token, 'UTF8')), 'hex')
     for update;
  v_refusal := case
    when v_token.token_hash is null then 'unknown'
    when p_run_id is not null and v_token.run_id <> p_run_id then 'other run'
    when v_token.used_at is not null then 'used'
    when v_token.expires_at <= now() then 'expired'
    when v_token.subject_account is not null
         and not exists (select 1 from threadline.accounts a
                          where a.id = v_token.subject_account and a.removed_at is null)
      then 'account removed'
  end;
  if v_refusal is null then
    update threadline.resume_tokens t set used_at = now(), used_xact = pg_current_xact_id()
     where t.token_hash = v_token.token_hash;
  end if;
  return query select v_refusal, v_token.run_id, v_token.gate_key, v_token.subject,
                      v_token.expires_at, v_token.used_at;
end;
$$;
