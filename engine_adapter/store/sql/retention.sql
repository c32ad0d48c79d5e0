-- Retention (migration 023): which finished runs and outputs are past their time, and removing them.

-- runs_past_retention --
-- Finished top-level runs older than their workflow's retention.runs (%(runs)s: slug -> seconds,
-- each workflow's as retention.py reads it), oldest first.
select r.run_id
  from threadline.run_threads r
 where r.parent_run_id is null and r.state in ('completed', 'failed', 'cancelled')
   and r.finished_at < now() - make_interval(secs => (%(runs)s::jsonb ->> r.workflow)::float8)
 order by r.finished_at
 limit %(limit)s

-- outputs_past_retention --
-- Finished runs with streamed command output older than their workflow's retention.output
-- (%(output)s: slug -> seconds).
select r.run_id
  from threadline.run_threads r
 where r.state in ('completed', 'failed', 'cancelled')
   and r.finished_at < now() - make_interval(secs => (%(output)s::jsonb ->> r.workflow)::float8)
   and exists (select 1 from threadline.thread_entries e
                where e.run_id = r.run_id and e.author_kind = 'bot' and e.kind = 'progress')
 order by r.finished_at
 limit %(limit)s

-- count_past_retention --
-- What a cleanup would remove now (a dry run).
select (select count(*) from threadline.run_threads r
         where r.parent_run_id is null and r.state in ('completed', 'failed', 'cancelled')
           and r.finished_at < now()
                 - make_interval(secs => (%(runs)s::jsonb ->> r.workflow)::float8)) as runs,
       (select count(*) from threadline.thread_entries e
          join threadline.run_threads r on r.run_id = e.run_id
         where e.author_kind = 'bot' and e.kind = 'progress'
           and r.state in ('completed', 'failed', 'cancelled')
           and r.finished_at < now()
                 - make_interval(secs => (%(output)s::jsonb ->> r.workflow)::float8)) as outputs,
       (select count(*) from absurd.e_threadline
         where emitted_at < absurd.current_time()
                 - make_interval(secs => (select runs_s from threadline.retention_defaults)))
         as events,
       (select count(*) from threadline.workers w
         where w.last_beat_at < now() - interval '1 day'
           and not exists (select 1 from threadline.live_workers l where l.id = w.id)) as workers,
       (select count(*) from threadline.schedule_ticks_past_retention(%(runs)s)) as ticks

-- delete_runs --
select threadline.delete_runs(%(run_ids)s::uuid[]) as removed

-- delete_outputs --
select threadline.delete_outputs(%(run_ids)s::uuid[]) as removed

-- cleanup_engine_events --
-- The engine's emitted events older than the default run retention (migration 023).
select threadline.cleanup_engine_events(%(limit)s) as removed

-- prune_dead_workers --
-- Forget processes dead for a day, counting them (migration 023).
select threadline.prune_dead_workers() as removed

-- prune_schedule_ticks --
-- Schedule slots past their workflow's run retention, each workflow's latest kept (migration 028).
select threadline.prune_schedule_ticks(%(runs)s, %(limit)s) as removed

-- try_cleanup_lock --
-- One cleanup at a time across conductors (a session lock, released by unlock_cleanup).
select pg_try_advisory_lock(7414, 0) as locked

-- unlock_cleanup --
select pg_advisory_unlock(7414, 0) as unlocked

-- start_cleanup --
select threadline.start_cleanup(%(by)s) as id

-- finish_cleanup --
select threadline.finish_cleanup(%(id)s, %(runs)s, %(outputs)s, %(events)s, %(workers)s,
                                 %(ticks)s, %(error)s)

-- last_cleanup --
select id, started_at, finished_at, by_worker, runs_removed, outputs_removed, events_removed,
       workers_removed, ticks_removed, error
  from threadline.cleanups order by id desc limit 1

-- workflow_retentions --
-- Each workflow's own retention setting, if any (retention.py fills in the defaults).
select slug, recipe -> 'retention' as retention from threadline.workflows

-- retention_defaults --
select runs_s, output_s, set_by, set_at from threadline.retention_defaults

-- set_retention_defaults --
update threadline.retention_defaults
   set runs_s = %(runs_s)s, output_s = %(output_s)s, set_by = %(set_by)s, set_at = now()

-- fold_run_counts --
-- The kept run counts of past days folded into one row each (migration 026).
select threadline.fold_run_counts() as removed
