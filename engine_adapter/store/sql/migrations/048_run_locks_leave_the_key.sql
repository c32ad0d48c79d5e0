-- A run's row is locked to change its state, its thread's next seq or its admission, never its
-- key. `for update` also blocks the key-share lock that a foreign key check takes, and
-- run_threads references itself (a child run's parent): a transaction that updates a child's
-- row twice re-checks the parent's key, so a report on a child run and an append on its parent
-- deadlocked. `for no key update` serialises the same writers and lets the key checks through.
do $$
declare
  v_fn text;
  v_def text;
  v_new text;
begin
  foreach v_fn in array array[
    'threadline.admit_all(text)',
    'threadline.admit_queued(text, text)',
    'threadline.append_entry(uuid, text, text, text, text, text, text, jsonb)',
    'threadline.claim_step(text[], text, text, double precision)',
    'threadline.lock_run(uuid)',
    'threadline.report_step(text, uuid, text, integer, text, text, text, double precision, text, text, text, text, jsonb, integer)',
    'threadline.set_run_state(uuid, text, text, integer, text, text, timestamptz)'
  ] loop
    v_def := pg_get_functiondef(v_fn::regprocedure);
    v_new := regexp_replace(v_def, '\mfor update\M', 'for no key update', 'g');
    if v_new = v_def or array_length(regexp_split_to_array(v_def, '\mfor update\M'), 1) <> 2 then
      raise exception 'migration 048 expected one run lock in %', v_fn;
    end if;
    execute v_new;
  end loop;
end;
$$;
