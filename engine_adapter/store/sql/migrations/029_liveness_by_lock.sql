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

-- A bot's claim (migration 025) asks step_key_free without gathering the live workers first:
-- its definition, with that one argument gone.
do $$
declare
  v_def constant text := pg_get_functiondef(
    'threadline.claim_step(text[], text, text, double precision)'::regprocedure);
  v_old constant text :=
    'threadline.step_key_free(rt.await_key, (select array_agg(id) from threadline.live_workers))';
begin
  if position(v_old in v_def) = 0 then
    raise exception 'threadline.claim_step does not read as migration 025 wrote it';
  end if;
  execute replace(v_def, v_old, 'threadline.step_key_free(rt.await_key)');
end;
$$;
