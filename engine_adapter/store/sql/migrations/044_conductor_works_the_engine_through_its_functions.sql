-- The conductor's login writes no table of Absurd's: the engine's SDK (and Threadline's own
-- engine queries) only ever call Absurd's functions, never its tables, so the functions the
-- conductor calls run as their owner and the conductor executes only those. Absurd's tables are
-- left exactly as Absurd made them.
--
--   * The functions made security definer are the ones that write what the conductor works: a
--     run claimed, its lease extended, completed, failed or rescheduled, a checkpoint written, an
--     event awaited or emitted, a task cancelled. Each runs with a fixed search_path.
--   * A definer function does for whoever executes it what its owner may: so the console's
--     login, which held EXECUTE on every routine of Absurd's (but wrote neither its checkpoints
--     nor its events), keeps of them only what it calls (cancel, retry) and the reading ones; the
--     ingress, the bots and the viewer execute none of them.
--   * The conductor keeps only the routines of Absurd's it calls; a process's row in
--     threadline.workers is written only through migration 043's functions.

do $$
declare
  v_fn regprocedure;
begin
  foreach v_fn in array array[
    'absurd.await_event(text, uuid, uuid, text, text, integer)',
    'absurd.cancel_task(text, uuid)',
    'absurd.claim_task(text, text, integer, integer)',
    'absurd.complete_run(text, uuid, jsonb)',
    'absurd.emit_event(text, text, jsonb)',
    'absurd.extend_claim(text, uuid, integer)',
    'absurd.fail_run(text, uuid, jsonb, timestamptz)',
    'absurd.retry_task(text, uuid, jsonb)',
    'absurd.schedule_run(text, uuid, timestamptz)',
    'absurd.set_task_checkpoint_state(text, uuid, text, jsonb, uuid, integer)'
  ]::regprocedure[]
  loop
    execute format('alter function %s security definer set search_path = pg_catalog, pg_temp',
                   v_fn);
  end loop;
end;
$$;

-- The conductor: Absurd's tables read, written only through the functions above.
revoke insert, update, delete, truncate on all tables in schema absurd from threadline_conductor;
revoke all on function absurd.cleanup_all_queues (text), absurd.cleanup_events (text, integer, integer),
  absurd.cleanup_tasks (text, integer, integer), absurd.create_queue (text),
  absurd.create_queue (text, text), absurd.disable_cron (text),
  absurd.drop_detached_partition (text, text), absurd.drop_queue (text),
  absurd.enable_cron (text, text, text, text), absurd.ensure_partitions (text),
  absurd.ensure_queue_tables (text), absurd.get_queue_policy (text),
  absurd.list_detach_candidates (text), absurd.list_queues (),
  absurd.partition_week_tag (timestamptz), absurd.portable_uuidv7 (),
  absurd.retry_delay_seconds (jsonb, integer), absurd.retry_task (text, uuid, jsonb),
  absurd.schedule_detach_jobs (text), absurd.set_queue_policy (text, jsonb),
  absurd.spawn_task (text, text, jsonb, jsonb), absurd.uuidv7_floor (timestamptz),
  absurd.uuidv7_timestamp (uuid), absurd.week_bucket_utc (timestamptz)
  from threadline_conductor;

-- The console: none of the definer functions it does not call.
revoke all on function absurd.await_event (text, uuid, uuid, text, text, integer),
  absurd.claim_task (text, text, integer, integer), absurd.complete_run (text, uuid, jsonb),
  absurd.emit_event (text, text, jsonb), absurd.extend_claim (text, uuid, integer),
  absurd.fail_run (text, uuid, jsonb, timestamptz), absurd.schedule_run (text, uuid, timestamptz),
  absurd.set_task_checkpoint_state (text, uuid, text, jsonb, uuid, integer)
  from threadline_console;

-- Process rows: only through register_worker and beat_worker (migration 043); dead ones are
-- pruned by threadline.prune_dead_workers.
revoke insert, update, delete on threadline.workers from threadline_conductor;
revoke all on sequence threadline.worker_lock_keys from threadline_conductor;
