-- A retried attempt's limit is read from its retry note, whatever its output streamed first.
--
-- threadline_read.attempts (migration 050) read a retried attempt's why from the first progress
-- entry of that attempt, taking it for the bot's retry note ("Attempt 1 failed (timed out after
-- 1s) after ..."). An attempt whose command printed anything before it failed has its output's
-- progress entries first, so its limit_hit was null, and /metrics left it out of
-- threadline_sandbox_limits_hit_total. The note is now the attempt's progress entry that reads
-- as one. Same columns, same grants.

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
       and e.text ~ '^Attempt [0-9]+ failed \(.*\) after '
     order by e.seq desc limit 1) n on true;
