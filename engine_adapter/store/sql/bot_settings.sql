-- retake_run_agent --
-- A retried run's bot settings, taken again as they are now (migration 040): what the run kept
-- before and what it keeps from now on (commands.retry_run says in the thread what changed).
-- Through the checked door of migration 047 (a retry's only).
select * from threadline.retake_run_agent(%(run_id)s)
