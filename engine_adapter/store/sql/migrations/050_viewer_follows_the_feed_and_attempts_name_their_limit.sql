-- The viewer follows the change feed, an attempt names the limit that ended it, and the read
-- schema counts the runs that wait for a conductor.
--
-- 1. A notebook's live widgets (engine_adapter/explore/feed.py) connect as the viewer and follow
--    the console's change feed (threadline_changes) as a console does: follow_feed holds the
--    shared advisory lock (7415, 0) for as long as the listening connection lasts, which is what
--    makes the database say the feed at all (migrations 030 and 031). It takes a lock and writes
--    nothing, so the viewer may call it; LISTEN needs no grant. Without it a viewer's widget
--    heard only the conductors' channel and its two-second tick.
--
-- 2. threadline_read.attempts gains limit_hit (the read schema adds columns within a version):
--    memory, pids, cpu or tmp when the step's sandbox limit ended the attempt, timeout when its
--    timeout did, output when its output was cut at its limit. A bot says it in the attempt's
--    report: a last attempt's terminal entry carries it as its reason ("memory limit 512 MiB
--    reached", "timed out after 30s") and its output ends with "[output limit 64 KiB]"; an attempt
--    that is retried has a progress note instead ("Attempt 1 failed (cpu limit 1s reached) after
--    ..."), whose last lines carry the output's notes. /metrics counts them
--    (threadline_sandbox_limits_hit_total).

grant execute on function threadline.follow_feed () to threadline_viewer;

create function threadline_read.limit_hit (p_why text, p_output_tail text) returns text
  language sql immutable
  set search_path = pg_catalog, pg_temp
as $$
  select case
    when p_why ~ '^(memory|pids|cpu|tmp) limit ' then split_part(p_why, ' ', 1)
    when p_why like 'timed out after %' then 'timeout'
    when p_output_tail like '%[output limit %' then 'output'
  end
$$;
comment on function threadline_read.limit_hit (text, text) is
  'The limit an attempt met (memory, pids, cpu, tmp, timeout, output) from its report''s why and '
  'the last characters of its output; null when it met none.';

create or replace view threadline_read.attempts as
select c.run_id, r.workflow, threadline_read.step_of(c.step_key) as step,
       threadline_read.try_of(c.step_key) as try, c.step_key, c.attempt, c.worker_id, c.host,
       c.started_at, c.finished_at,
       coalesce(c.outcome, case when c.lease_until < now() then 'lost' else 'running' end)
         as outcome,
       extract(epoch from coalesce(c.finished_at, now()) - c.started_at)::float8 as duration_s,
       c.retry_at,
       (t.data ->> 'exit_code')::integer as exit_code,
       case when t.kind = 'signal.dispatch.failed' then left(t.text, 2000) end as error,
       threadline_read.limit_hit(
         coalesce(t.data ->> 'reason',
                  substring(n.text from '^Attempt [0-9]+ failed \((.*)\) after ')),
         coalesce(right(t.data ->> 'output', 400), right(n.text, 400))) as limit_hit
  from threadline.step_claims c
  join threadline.run_threads r on r.run_id = c.run_id
  left join lateral (
    select e.kind, e.text, e.data from threadline.thread_entries e
     where e.run_id = c.run_id and e.step_key = c.step_key and e.kind like 'signal.dispatch.%'
       and (e.data ->> 'attempt')::integer = c.attempt
     order by e.seq limit 1) t on true
  left join lateral (
    select e.text from threadline.thread_entries e
     where c.retry_at is not null and t.kind is null
       and e.run_id = c.run_id and e.step_key = c.step_key and e.kind = 'progress'
       and (e.data ->> 'attempt')::integer = c.attempt
     order by e.seq limit 1) n on true;
comment on column threadline_read.attempts.limit_hit is
  'The limit that ended it: memory, pids, cpu or tmp (its sandbox limits), timeout, or output '
  '(its output was cut at its limit); null when none.';

revoke all on function threadline_read.limit_hit (text, text) from public;
grant execute on function threadline_read.limit_hit (text, text)
  to threadline_viewer, threadline_console;

-- 3. How many runs wait for a conductor: ready (new, woken by a step's result, a decision or an
--    event, or done sleeping) and taken up by none yet, as a conductor's claim would find them
--    (Absurd's claim_task: an open run of a live task, available now). It grows when the
--    conductors fall behind; /metrics says it (threadline_runs_unclaimed).
create function threadline_read.runs_unclaimed () returns bigint
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select count(*) from absurd.r_threadline r
    join absurd.t_threadline t on t.task_id = r.task_id
   where r.state in ('pending', 'sleeping') and t.state in ('pending', 'sleeping', 'running')
     and r.available_at <= now()
$$;
comment on function threadline_read.runs_unclaimed () is
  'Runs ready for a conductor (new, woken, or done sleeping) that no conductor has taken up.';
revoke all on function threadline_read.runs_unclaimed () from public;
grant execute on function threadline_read.runs_unclaimed () to threadline_viewer, threadline_console;
