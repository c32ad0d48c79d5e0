-- A run is named by the tail of its id as readily as by its head (run_ids.py): run ids are
-- UUIDv7, whose head is the time, so the short id people see is the tail. This index finds a
-- tail as the primary key finds a head: its reversed text, matched by a prefix.
create index run_threads_id_tail on threadline.run_threads (reverse(run_id::text) text_pattern_ops);
