-- A resume token may be used naming the run its gate's run belongs to; the runs below a run
-- have one home.
--
-- The runtime contract follows a run until it stops or pauses at a gate, and a gate may be in a
-- run the followed one started (a parallel branch, a foreach item, a sub-workflow): the envelope
-- then hands out that gate's token, and the caller resumes the run it followed. A token still
-- decides only its own gate, as its subject, once; the run the caller names only has to be the
-- token's run or one above it. Otherwise migration 042's function, unchanged.
--
-- threadline.runs_below walks a run's tree down: the contract's look for a gate below the run it
-- follows, a rerun's look for decisions made below the steps it carries over, and this check.

create function threadline.runs_below (p_run_id uuid)
  returns table (run_id uuid, from_step text)
  language sql
  stable
  set search_path = pg_catalog, pg_temp
as $$
  -- Each run the given one started, and theirs, with the path of the given run's step it comes
  -- from.
  with recursive below as (
    select r.run_id, r.parent ->> 'step' as from_step
      from threadline.run_threads r
     where r.parent_run_id = p_run_id
    union all
    select r.run_id, b.from_step
      from threadline.run_threads r join below b on r.parent_run_id = b.run_id
  )
  select below.run_id, below.from_step from below
$$;

revoke all on function threadline.runs_below (uuid) from public;
grant execute on function threadline.runs_below (uuid) to threadline_console;

create or replace function threadline.use_resume_token (p_token text, p_run_id uuid)
  returns table (refusal text, run_id uuid, gate_key text, subject text,
                 expires_at timestamp with time zone, used_at timestamp with time zone)
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
    when p_run_id is not null and v_token.run_id <> p_run_id
         and v_token.run_id not in (select b.run_id from threadline.runs_below(p_run_id) b)
      then 'other run'
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
