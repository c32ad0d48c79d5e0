-- run_ids_matching --
-- The runs whose ids start with the hex digits given (the primary key's range from them padded
-- with 0s to them padded with fs) or end with them (the short id the console shows is the id's
-- tail), at most n of them (run_ids.resolve_run_id).
select run_id from threadline.run_threads
 where run_id between %(low)s::uuid and %(high)s::uuid
union
select run_id from threadline.run_threads
 where replace(run_id::text, '-', '') like '%%' || %(digits)s
 order by run_id
 limit %(n)s
