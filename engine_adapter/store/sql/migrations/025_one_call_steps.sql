-- A bot's claim and its report, each one call (one round trip) instead of six statements: the
-- same statements, in the same order and the same transaction, run inside the database. Both
-- run as the caller (security invoker): a bot keeps exactly the grants it had.

-- The next instruction a bot may claim, claimed: {} when there is none; {"contended": true} when
-- another bot claimed the candidate after this query's first snapshot (the caller tries again);
-- else the claim, the attempts closed as lost (so the caller can make sure their processes are
-- gone) and whether another candidate was waiting (so the caller wakes another slot).
create function threadline.claim_step (p_bots text[], p_worker_id text, p_host text,
                                       p_lease_s double precision)
  returns jsonb
  language plpgsql
as $$
declare
  v_cand record;
  v_first record;
  v_found integer := 0;
  v_lost jsonb;
  v_attempt integer;
  v_failures integer;
  v_text text;
  v_data jsonb;
  v_free boolean;
begin
  -- Up to two candidates, locked (skip locked): the first is claimed, the second only says there
  -- is more; its lock goes with this short transaction.
  for v_cand in
    select rt.run_id, rt.await_key, rt.bot
      from threadline.run_threads rt
     where rt.awaiting and rt.await_kind = 'bot' and rt.state = 'running'
       and (p_bots is null or rt.bot = any (p_bots))
       and threadline.step_key_free(rt.await_key, (select array_agg(id) from threadline.live_workers))
     order by rt.updated_at
     limit 2
       for update of rt skip locked
  loop
    v_found := v_found + 1;
    if v_found = 1 then
      v_first := v_cand;
    end if;
  end loop;
  if v_found = 0 then
    return '{}'::jsonb;
  end if;
  -- Re-checked with a fresh snapshot: the candidate query's may predate a claim another bot
  -- committed just before this one locked the run.
  select threadline.step_key_free(v_first.await_key) into v_free;
  if not v_free then
    return '{"contended": true}'::jsonb;
  end if;
  -- The caller must still be alive. A statement runs to its end even when its client has died
  -- meanwhile: a bot killed just after another of its slots claimed would otherwise find that
  -- claim lost (its own liveness lock gone with it) and claim again, for no process.
  if not exists (select 1 from threadline.live_workers where id = p_worker_id) then
    return '{}'::jsonb;
  end if;
  with lost as (
    update threadline.step_claims
       set finished_at = now(), outcome = 'lost'
     where step_key = v_first.await_key and finished_at is null
    returning attempt, host, pgid, worker_id
  )
  select coalesce(jsonb_agg(to_jsonb(lost)), '[]'::jsonb) into v_lost from lost;
  select coalesce(max(c.attempt), 0) + 1, count(*) filter (where c.outcome = 'failed')
    into v_attempt, v_failures
    from threadline.step_claims c
   where c.step_key = v_first.await_key;
  select e.text, e.data into v_text, v_data
    from threadline.thread_entries e
   where e.run_id = v_first.run_id and e.step_key = v_first.await_key and e.kind = 'instruction';
  insert into threadline.step_claims (step_key, attempt, run_id, worker_id, host, lease_until)
  values (v_first.await_key, v_attempt, v_first.run_id, p_worker_id, p_host,
          now() + make_interval(secs => p_lease_s));
  return jsonb_build_object(
    'run_id', v_first.run_id, 'step_key', v_first.await_key, 'bot', v_first.bot,
    'attempt', v_attempt, 'failures', v_failures, 'text', v_text, 'data', v_data,
    'lost', v_lost, 'more', v_found > 1);
end;
$$;

-- An attempt's end, fenced by its attempt number; returns what happened:
--   dropped    the attempt is no longer current (finished, or a newer attempt exists)
--   cancelled  the run no longer awaits this step (cancelled, timed out, retried elsewhere)
--   retry      p_backoff_s given: the attempt failed and another is due after that wait
--   done       the reply, the terminal signal and the step's done event are written
-- p_outcome is the claim's (completed | failed); p_message the reply (null: none, as for a
-- paused agent round, whose call is in the thread already); p_note the retry's progress line.
create function threadline.report_step (
  p_queue text, p_run_id uuid, p_step_key text, p_attempt integer, p_bot text,
  p_outcome text, p_backoff_s double precision, p_note text, p_message text,
  p_terminal_kind text, p_terminal_text text, p_payload jsonb, p_exit_code integer
)
  returns text
  language plpgsql
as $$
declare
  v_current boolean;
  v_run record;
  v_entry_data jsonb := jsonb_build_object('attempt', p_attempt, 'exit_code', p_exit_code);
begin
  select c.finished_at is null
         and not exists (select 1 from threadline.step_claims n
                          where n.step_key = c.step_key and n.attempt > c.attempt)
    into v_current
    from threadline.step_claims c
   where c.step_key = p_step_key and c.attempt = p_attempt
     for update;
  if not coalesce(v_current, false) then
    return 'dropped';
  end if;
  select state, await_key, awaiting into v_run
    from threadline.run_threads where run_id = p_run_id for update;
  if not found or not (v_run.state = 'running' and v_run.await_key = p_step_key
                       and v_run.awaiting) then
    update threadline.step_claims set finished_at = now(), outcome = 'cancelled'
     where step_key = p_step_key and attempt = p_attempt;
    return 'cancelled';
  end if;
  update threadline.step_claims
     set finished_at = now(), outcome = p_outcome,
         retry_at = now() + make_interval(secs => p_backoff_s)
   where step_key = p_step_key and attempt = p_attempt;
  if p_backoff_s is not null then
    perform threadline.append_entry(p_run_id, 'bot', p_bot, 'progress', p_step_key, null,
                                    p_note, v_entry_data);
    return 'retry';
  end if;
  if p_message is not null then
    perform threadline.append_entry(p_run_id, 'bot', p_bot, 'message', p_step_key, null,
                                    p_message, v_entry_data);
  end if;
  perform threadline.append_entry(p_run_id, 'bot', p_bot, p_terminal_kind, p_step_key,
                                  'terminal:' || p_step_key, p_terminal_text, p_payload);
  perform threadline.emit_step_done(p_queue, p_run_id, p_step_key, p_payload);
  return 'done';
end;
$$;


-- The conductor's SEND in one call: the System entry (once per step key: a replay posts nothing
-- and re-arms nothing), the run armed to await it, and the wake-up of whoever acts on it (the
-- channel and payload db.notify would use; no channel: nobody). Returns the entry's seq, null on
-- a replay.
create function threadline.send_entry (
  p_run_id uuid, p_kind text, p_text text, p_step_key text, p_data jsonb,
  p_state text, p_step text, p_try integer, p_await_kind text,
  p_channel text, p_wake text
)
  returns integer
  language plpgsql
as $$
declare
  v_seq integer;
begin
  v_seq := threadline.append_entry(p_run_id, 'system', 'threadline', p_kind, p_step_key,
                                   p_kind || ':' || p_step_key, p_text, p_data);
  if v_seq is not null then
    update threadline.run_threads
       set state = p_state, current_step = p_step, current_try = p_try,
           await_key = p_step_key, await_kind = p_await_kind, awaiting = true,
           wake_at = null, updated_at = now(),
           finished_at = case when p_state in ('completed', 'failed', 'cancelled') then now() end
     where run_id = p_run_id and state <> 'cancelled';
  end if;
  if p_channel is not null then
    perform pg_notify(p_channel, p_wake);
  end if;
  return v_seq;
end;
$$;
