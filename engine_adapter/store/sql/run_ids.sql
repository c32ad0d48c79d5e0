-- run_ids_matching --
-- The runs whose ids start with the hex digits given (the primary key's range from them padded
-- with 0s to them padded with fs) or end with them (the short id the console shows is the id's
-- tail: its reversed text starts with the reversed tail, index of migration 038), at most n.
select run_id from threadline.run_threads
 where run_id between %(low)s::uuid and %(high)s::uuid
union
select run_id from threadline.run_threads
 where reverse(run_id::text) like %(reversed_tail)s || '%%'
 order by run_id
 limit %(n)s
