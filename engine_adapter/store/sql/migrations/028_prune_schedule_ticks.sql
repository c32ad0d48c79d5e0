-- A scheduled workflow claims one slot row per fire (threadline.schedule_ticks), so a workflow on
-- a one-minute schedule gains 525,600 rows a year. The cleanup job prunes slots past the
-- workflow's run retention, keeping each workflow's latest slot: the schedule resumes from it
-- (a missed fire is not spawned twice, and not caught up from the beginning of time).
alter table threadline.cleanups add column ticks_removed integer not null default 0;

-- The slots a cleanup may remove (the rule's one home: the dry run counts them, the job deletes
-- them). p_runs: slug -> seconds, each workflow's retention.runs as retention.py reads it.
create function threadline.schedule_ticks_past_retention (p_runs jsonb)
  returns table (workflow text, slot timestamptz)
  language sql stable
as $$
  select s.workflow, s.slot
    from threadline.schedule_ticks s
   where s.slot < now() - make_interval(secs => (p_runs ->> s.workflow)::float8)
     and s.slot < (select max(m.slot) from threadline.schedule_ticks m
                    where m.workflow = s.workflow)
$$;

create function threadline.prune_schedule_ticks (p_runs jsonb, p_limit integer) returns integer
  language plpgsql security definer set search_path = pg_catalog, pg_temp
as $$
declare
  v_count integer;
begin
  delete from threadline.schedule_ticks t
   where (t.workflow, t.slot) in (
     select p.workflow, p.slot from threadline.schedule_ticks_past_retention(p_runs) p
      limit p_limit);
  get diagnostics v_count = row_count;
  return v_count;
end;
$$;

revoke execute on function threadline.prune_schedule_ticks (jsonb, integer) from public;
grant execute on function threadline.prune_schedule_ticks (jsonb, integer) to threadline_conductor,
  threadline_console;
