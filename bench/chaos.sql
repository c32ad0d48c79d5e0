-- chaos_run_states --
-- How many of the given runs are in each state (a run never written shows as missing).
select state, count(*)::int as runs
  from threadline.run_threads
 where run_id = any(%(run_ids)s::uuid[])
 group by state

-- chaos_steps --
-- Per step key of the given runs: its instructions, its terminals, whether it completed, and the
-- highest attempt its thread shows (attempt 1 is implicit; later ones announce themselves).
select step_key,
       count(*) filter (where kind = 'instruction')::int as instructions,
       count(*) filter (where kind like 'signal.dispatch.%%')::int as terminals,
       bool_or(kind = 'signal.dispatch.completed') as completed,
       greatest(1, coalesce(max((data ->> 'attempt')::int), 1)) as attempts_shown
  from threadline.thread_entries
 where run_id = any(%(run_ids)s::uuid[]) and step_key is not null
 group by step_key
having count(*) filter (where kind = 'instruction') > 0

-- chaos_claims --
-- Bot attempts of the given runs, and how many ended as lost (their bot was killed).
select count(*)::int as attempts,
       count(*) filter (where outcome = 'lost')::int as lost
  from threadline.step_claims
 where run_id = any(%(run_ids)s::uuid[])

-- chaos_run_span --
-- From the first run's creation to the last run's end, on the database clock.
select extract(epoch from (max(finished_at) - min(created_at)))::float8 as seconds
  from threadline.run_threads
 where run_id = any(%(run_ids)s::uuid[])

-- chaos_unfinished --
-- Runs of the benchmark's workflow not yet ended.
select count(*)::int as runs
  from threadline.run_threads
 where workflow = %(slug)s and state not in ('completed', 'failed', 'cancelled')

-- soak_aged_runs --
-- Finished runs of the benchmark's workflow, backdated past any retention, for the cleanup job
-- to find while the chaos goes on: rows of history only (no engine task), as seeded ones are.
insert into threadline.run_threads
  (run_id, workflow, workflow_version, recipe_hash, recipe, payload, bot, trigger, state,
   current_step, created_at, updated_at, finished_at)
select gen_random_uuid(), w.slug, w.version, w.hash, w.recipe, '{"aged": true}'::jsonb, w.bot,
       '{"kind": "manual"}'::jsonb, 'completed', 'three', at, at, at + interval '1 second'
  from threadline.workflows w,
       lateral (select now() - interval '400 days' - i * interval '1 minute' as at
                  from generate_series(1, %(runs)s) i) t
 where w.slug = %(slug)s

-- soak_aged_left --
-- Backdated runs the cleanup has not removed yet.
select count(*)::int as runs
  from threadline.run_threads
 where workflow = %(slug)s and payload = '{"aged": true}'::jsonb
