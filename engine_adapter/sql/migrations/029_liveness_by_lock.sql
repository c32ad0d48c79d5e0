-- Whether a process is alive (it holds its advisory lock (7411, lock_key) for its lifetime) was
-- read from pg_locks: that copies the server's whole lock table, under every partition of the
-- lock manager and every backend's fast-path lock, and a bot's claim read it three times. Its
-- cost grows with the connections and the locks they hold, on the busiest path there is. Asking
-- the lock manager about the one lock costs the same at any load: try to take it shared. A live
-- process holds it exclusively, so the try fails; a dead one's is free, so the try succeeds and
-- the lock is given back at once. (Never ask on the connection holding the lock: a session's own
-- lock does not conflict with itself. Only a process's heartbeat connection holds it.)
create function threadline.worker_alive (p_lock_key integer) returns boolean
  language sql
  volatile
as $$
  select case
           when p_lock_key is null then false  -- no such process (a pruned row)
           when pg_try_advisory_lock_shared(7411, p_lock_key)
             then not pg_advisory_unlock_shared(7411, p_lock_key)
           else true
         end
$$;

create or replace view threadline.live_workers as
select w.* from threadline.workers w where threadline.worker_alive(w.lock_key);

-- Whether a bot may claim a step key now (migration 001's rule, unchanged): no live claim, no
-- pending retry, no completed attempt. A claim's process is asked about only while its attempt
-- is open and its lease runs.
drop function threadline.step_key_free (text, text[]);
create function threadline.step_key_free (p_step_key text)
  returns boolean
  language sql
  volatile
as $$
  select not exists (
    select 1 from threadline.step_claims c
     where c.step_key = p_step_key
       and (c.outcome = 'completed'
            or c.retry_at > now()
            or (c.finished_at is null and c.lease_until > now()
                and threadline.worker_alive((select w.lock_key from threadline.workers w
                                              where w.id = c.worker_id)))))
$$;

-- A bot's claim (migration 025), unchanged but for the rule above: it no longer gathers the live
-- workers first.
create or replace function threadline.claim_step (p_bots text[], p_worker_id text, p_host text,
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
       and threadline.step_key_free(rt.await_key)
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
