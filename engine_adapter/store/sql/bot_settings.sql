-- retake_run_agent --
-- A retried run's bot settings, taken again as they are now (migration 040): what the run kept
-- before and what it keeps from now on (commands.retry_run says in the thread what changed).
with before as (
  select r.run_id, r.agent from threadline.run_threads r where r.run_id = %(run_id)s
)
update threadline.run_threads r
   set agent = threadline.agent_snapshot(r.bot)
  from before b
 where r.run_id = b.run_id
returning r.bot, b.agent as before, r.agent as after
