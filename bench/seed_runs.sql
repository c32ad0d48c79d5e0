-- Synthetic run history for the console's list benchmark: %(runs)s runs over 30 days, set-based,
-- in seconds. They are rows of history only (no engine tasks), as finished runs are.
insert into threadline.workflows (slug, name, bot, recipe, version, hash)
select 'seed-' || w, 'Seeded workflow ' || w, 'local',
       jsonb_build_object('slug', 'seed-' || w, 'bot', 'local',
                          'steps', jsonb_build_array(jsonb_build_object('id', 'check', 'run_command', 'true'))),
       1, 'seed'
  from generate_series(1, 5) w
on conflict (slug) do nothing;

insert into threadline.run_threads
  (run_id, workflow, workflow_version, recipe_hash, recipe, payload, bot, trigger, state, current_step,
   created_at, updated_at, finished_at)
select gen_random_uuid(), 'seed-' || (1 + i %% 5), 1, 'seed', '{"steps": []}'::jsonb,
       jsonb_build_object('n', i, 'ticket', 'T-' || (i::bigint * 7919 %% 100000)), 'local',
       jsonb_build_object('kind', (array['manual', 'schedule', 'webhook', 'event'])[1 + i %% 4]),
       (array['completed', 'completed', 'completed', 'failed', 'cancelled', 'waiting', 'sleeping'])[1 + i %% 7],
       'check', at, at, case when i %% 7 < 5 then at + interval '3 seconds' end
  from generate_series(1, %(runs)s) i,
       lateral (select now() - (i::float8 / %(runs)s) * interval '30 days' as at) t;

insert into threadline.step_claims (step_key, attempt, run_id, worker_id, host, lease_until, started_at,
                                    finished_at, outcome)
select r.run_id || ':check:1', 1, r.run_id, 'seed', 'seed', r.created_at, r.created_at,
       r.created_at + (random() * interval '5 seconds'), 'completed'
  from threadline.run_threads r
 where r.workflow like 'seed-%%' and r.state = 'completed'
 order by r.created_at desc
 limit %(claims)s;

analyze threadline.run_threads;
analyze threadline.step_claims;
