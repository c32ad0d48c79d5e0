-- Control flow: parallel branches, parallel foreach items and sub-workflows run as child runs of a
-- parent run. A child is a run like any other (its own thread, steps, bot and engine task); its
-- parent's step waits for it, holding no process, on the event this migration emits when the
-- child finishes, whichever code finished it (its own handler, a cancel, a parent's cancel).

alter table threadline.run_threads
  add column parent_run_id uuid references threadline.run_threads (run_id),
  -- {run_id, step, try, branch, notify: [event names]}: where in its parent the child belongs
  add column parent jsonb,
  -- what a finished run hands on: {steps: {id: view}, outputs: {name: value}, declared: {...}}
  add column outputs jsonb;

create index run_threads_parent on threadline.run_threads (parent_run_id)
  where parent_run_id is not null;

-- A finished child emits `threadline.run.done:<child>` and each event its parent asked for (the
-- first-finished event of a `completion: any` group): first write wins, so a late loser of an
-- `any` group changes nothing.
create function threadline.child_finished () returns trigger
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  v_payload jsonb := jsonb_build_object(
    'status', new.state, 'run_id', new.run_id, 'branch', new.parent ->> 'branch',
    'outputs', coalesce(new.outputs, '{}'::jsonb));
  v_event text;
begin
  perform absurd.emit_event(tg_argv[0], 'threadline.run.done:' || new.run_id, v_payload);
  for v_event in select jsonb_array_elements_text(coalesce(new.parent -> 'notify', '[]'::jsonb))
  loop
    perform absurd.emit_event(tg_argv[0], v_event, v_payload);
  end loop;
  perform pg_notify('threadline', 'child:' || new.parent_run_id);
  return null;
end;
$$;

create trigger run_threads_child_finished after update of state on threadline.run_threads
  for each row
  when (new.parent_run_id is not null
        and new.state in ('completed', 'failed', 'cancelled')
        and old.state not in ('completed', 'failed', 'cancelled'))
  execute function threadline.child_finished('threadline');

revoke all on function threadline.child_finished () from public;
