-- Every thread append updates its run's next_seq and updated_at. With updated_at in an index
-- that update could never be HOT (a new index entry in every index of run_threads, each time);
-- without it, and with room left on each page for the new row version, it usually is.
drop index threadline.run_threads_awaiting;
create index run_threads_awaiting on threadline.run_threads (await_kind) where awaiting;
alter table threadline.run_threads set (fillfactor = 80);
