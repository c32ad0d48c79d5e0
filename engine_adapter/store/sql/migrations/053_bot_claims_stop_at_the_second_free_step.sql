-- A bot's claim looks at as few waiting steps as it needs, not at every one.
--
-- claim_step chose the oldest awaiting bot step whose key was free (no completed attempt, no
-- backoff, no live claim), two at most. The key's check is a function, so Postgres ran it for
-- every awaiting bot step of the database before sorting them and taking two: with N runs in
-- flight every claim cost N checks (about 380 per three-step workflow at 200 in flight; at
-- thousands in flight, most of the server's time), and the sort read all N.
--
-- Steps are now taken in run order (oldest run first: UUIDv7 run ids are time-ordered) from
-- an index of the runs whose step is for a bot, which a step's SEND and done event leave as it
-- is (they change neither the state nor the await kind, so they stay HOT updates). The keys
-- are checked one by one as the scan reaches them, and it stops at the second free one: what it
-- passes over are the steps in progress, about one per bot slot. The chosen run is then locked
-- (skipping one another claim holds) and its key checked again, as before.
create index run_threads_bot_steps on threadline.run_threads (run_id)
  where state = 'running' and await_kind = 'bot';

create or replace function threadline.claim_step(p_bots text[], p_worker_id text, p_host text, p_lease_s double precision) RETURNS jsonb
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_caller text := threadline.caller_kind();
  v_cand record;
  v_first record;
  v_found integer := 0;
  v_lost jsonb;
  v_attempt integer;
  v_failures integer;
  v_text text;
  v_data jsonb;
  v_secret text;
begin
  if v_caller not in ('owner', 'bots') then
    perform threadline.refuse('claiming a step');
  end if;
  if p_lease_s is null or p_lease_s <= 0 or p_lease_s > 3600 then
    raise exception 'lease_s must be within (0, 3600] seconds, not %', p_lease_s
      using errcode = '22023';
  end if;
  for v_cand in
    select rt.run_id, rt.await_key, rt.bot
      from threadline.run_threads rt
     where rt.state = 'running' and rt.await_kind = 'bot' and rt.awaiting
       and (p_bots is null or rt.bot = any (p_bots))
     order by rt.run_id
  loop
    continue when not threadline.step_key_free(v_cand.await_key);  -- in progress, or done
    if v_found = 0 then
      perform 1 from threadline.run_threads rt
       where rt.run_id = v_cand.run_id and rt.awaiting and rt.await_key = v_cand.await_key
         for no key update skip locked;
      continue when not found;  -- another claim holds it, or its step moved on meanwhile
      v_first := v_cand;
    end if;
    v_found := v_found + 1;
    exit when v_found = 2;  -- a second free step: `more` tells the bot to wake another slot
  end loop;
  if v_found = 0 then
    return '{}'::jsonb;
  end if;
  if not threadline.step_key_free(v_first.await_key) then
    return '{"contended": true}'::jsonb;
  end if;
  -- The caller must be a live bot process (checked last: it asks the lock manager).
  if not exists (select 1 from threadline.live_workers
                  where id = p_worker_id and (kind = 'bots' or v_caller = 'owner')) then
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
  v_secret := replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', '');
  insert into threadline.step_claims (step_key, attempt, run_id, worker_id, host, lease_until,
                                      secret_hash)
  values (v_first.await_key, v_attempt, v_first.run_id, p_worker_id, p_host,
          now() + make_interval(secs => p_lease_s), threadline.claim_secret_hash(v_secret));
  return jsonb_build_object(
    'run_id', v_first.run_id, 'step_key', v_first.await_key, 'bot', v_first.bot,
    'attempt', v_attempt, 'failures', v_failures, 'text', v_text, 'data', v_data,
    'lost', v_lost, 'more', v_found > 1, 'secret', v_secret);
end;
$$;
