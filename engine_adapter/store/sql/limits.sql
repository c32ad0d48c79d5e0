-- Concurrency caps (migration 021): global, per initiator, and a workflow's max_concurrent_runs.

-- list_limits --
-- Every cap with the top-level runs holding a place under it and those waiting for one.
select l.kind, l.name, l.max_runs, l.set_by, l.set_at,
       threadline.active_top_runs(nullif(l.name, '')) as active,
       (select count(*) from threadline.run_threads q
         where q.state = 'queued' and (l.kind = 'global' or q.initiator = l.name)) as queued
  from threadline.run_limits l
 order by l.kind desc, l.name

-- set_limit --
insert into threadline.run_limits (kind, name, max_runs, set_by)
values (%(kind)s, %(name)s, %(max_runs)s, %(set_by)s)
on conflict (kind, name) do update
   set max_runs = excluded.max_runs, set_by = excluded.set_by, set_at = now()

-- remove_limit --
delete from threadline.run_limits where kind = %(kind)s and name = %(name)s
returning kind

-- run_caps --
-- Every cap that applies to a run, with the runs holding a place under each (the run itself not
-- counted unless it holds one), and the queued runs ahead of it in line.
select r.state, r.workflow, r.initiator,
       (w.recipe ->> 'max_concurrent_runs')::integer as workflow_max,
       threadline.active_runs(r.workflow) as workflow_active,
       (select max_runs from threadline.run_limits
         where kind = 'initiator' and name = r.initiator) as initiator_max,
       threadline.active_top_runs(r.initiator) as initiator_active,
       (select max_runs from threadline.run_limits where kind = 'global') as global_max,
       threadline.active_top_runs(null) as global_active,
       (select count(*) from threadline.run_threads q
         where q.state = 'queued' and q.queue_seq < r.queue_seq
           and (exists (select 1 from threadline.run_limits) or q.workflow = r.workflow))
         as ahead
  from threadline.run_threads r
  join threadline.workflows w on w.slug = r.workflow
 where r.run_id = %(run_id)s
