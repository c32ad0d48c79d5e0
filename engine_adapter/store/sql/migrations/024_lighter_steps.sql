-- Every thread append updates its run's next_seq and updated_at. With updated_at in an index
-- that update could never be HOT (a new index entry in every index of run_threads, each time);
-- without it, and with room left on each page for the new row version, it usually is.
drop index threadline.run_threads_awaiting;
create index run_threads_awaiting on threadline.run_threads (await_kind) where awaiting;
alter table threadline.run_threads set (fillfactor = 80);

-- Whether a bot may claim a step key now (migration 001's rule, unchanged): no live claim, no
-- pending retry, no completed attempt. `p_live`, the live workers' ids, lets a caller checking
-- many keys read pg_locks once for all of them (the claim query); without it, it is read here.
drop function threadline.step_key_free (text);
create function threadline.step_key_free (p_step_key text, p_live text[] default null)
  returns boolean
  language sql
  stable
as $$
  select not exists (
    select 1 from threadline.step_claims c
     where c.step_key = p_step_key
       and ((c.finished_at is null and c.lease_until > now()
             and c.worker_id = any (coalesce(p_live,
                                             array(select id from threadline.live_workers))))
            or c.outcome = 'completed'
            or c.retry_at > now()))
$$;
