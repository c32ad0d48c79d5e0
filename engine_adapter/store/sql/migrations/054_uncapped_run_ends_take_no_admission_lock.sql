-- A run's end takes the workflow's admission lock only when its workflow can have runs waiting.
--
-- Every run's end admits the next queued runs of its workflow (run_finished_admit ->
-- admit_queued), under the workflow's admission lock, held until the end commits. For a
-- workflow with no cap that lock guarded nothing (its spawns never queue, and take no lock),
-- yet every end of its runs took it: one workflow's run ends committed one at a time,
-- server-wide, whatever the number of conductors.
--
-- admit_queued now returns at once, with no lock, when nothing is capped (neither the
-- workflow's max_concurrent_runs nor any run limit) and no run of the workflow is queued: the
-- spawn's own test for queueing, the same rows. A cap set on the workflow while its run ends is
-- the one case this leaves to the conductor's admission sweep (every 10 s).
create or replace function threadline.admit_queued(p_queue text, p_workflow text) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_max integer;
  v_run record;
  v_admitted integer := 0;
begin
  perform threadline.require_caller(
    array['conductor', 'console', 'hooks'], 'admitting runs');
  if not exists (select 1 from threadline.run_limits)
     and not exists (select 1 from threadline.workflows w
                      where w.slug = p_workflow
                        and coalesce(jsonb_typeof(w.recipe -> 'max_concurrent_runs'), 'null')
                            <> 'null')
     and not exists (select 1 from threadline.run_threads r
                      where r.workflow = p_workflow and r.state = 'queued') then
    return 0;  -- nothing capped, nothing waiting: no lock to take (see above)
  end if;
  perform threadline.lock_admission(p_workflow);
  if exists (select 1 from threadline.run_limits) then
    return threadline.admit_all(p_queue);
  end if;
  if not exists (select 1 from threadline.run_threads where workflow = p_workflow and state = 'queued') then
    return 0;  -- the common case (checked under the lock: a queued run committed before it is seen)
  end if;
  select (recipe ->> 'max_concurrent_runs')::integer into v_max
    from threadline.workflows where slug = p_workflow;
  for v_run in
    select run_id from threadline.run_threads
     where workflow = p_workflow and state = 'queued'
     order by queue_seq
     limit case when v_max is null then null
                else greatest(v_max - threadline.active_runs(p_workflow), 0) end
     for no key update
  loop
    if threadline.admit_run(p_queue, v_run.run_id,
         'Starting: a place is free (max_concurrent_runs '
           || coalesce(v_max::text, 'no longer set') || ').') then
      v_admitted := v_admitted + 1;
    end if;
  end loop;
  return v_admitted;
end;
$$;
