-- frame_schedule_slots --
-- A workflow's schedule slot rows, oldest first: each slot handled, the run it started, the slots it skipped.
select slot, run_id, skipped
  from threadline.schedule_ticks
 where workflow = %(workflow)s
 order by slot
