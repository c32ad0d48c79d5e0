-- Wake-ups go out after the commit, not in it.
--
-- A transaction that NOTIFYs takes one lock for the whole server before its commit and holds it
-- until its commit record is flushed (so notifications queue in commit order). Notifying commits
-- therefore flush one at a time, never as a group, and nearly every write of a step notified
-- someone: the SEND wakes the bots, the report the conductor, and the change feed the console.
-- At a flush of F ms the whole server could commit at most 1000/F of them a second, however many
-- conductors and bots share it (bench/notify_lock.py).
--
-- So the database's functions call threadline.wake instead of pg_notify. On a connection that
-- sets threadline.wakes_after_commit (every Threadline process: engine_adapter/store/db.py), wake only
-- tells the client, with a notice; the client sends what its transaction collected once that
-- transaction has committed, through threadline.send_wakes, in a transaction of its own that does
-- not wait for its flush (a notification is never durable anyway), and drops it on a rollback.
-- Anyone else (psql, absurdctl, a script) gets pg_notify inside the transaction, as before.
-- A process killed between its commit and its wake-ups loses them: every listener also looks
-- for work on a timer (a conductor and bots each second), so that costs time, never a run.

-- The console's change feed (migration 004) is worth saying only while a console follows it:
-- each console process calls follow_feed on its listening connection (console/live.py), which
-- holds (7415, 0) shared for as long as that connection lasts, so a try of it exclusive fails
-- while one does. A console starts following before it reads anything, so it misses no change.
create function threadline.follow_feed () returns void
  language sql
as $$
  select pg_advisory_lock_shared(7415, 0)
$$;

create function threadline.feed_followed () returns boolean
  language sql
  volatile
as $$
  select case when pg_try_advisory_lock(7415, 0) then not pg_advisory_unlock(7415, 0)
              else true end
$$;

-- The notice's SQLSTATE (waking.WAKE_NOTICE): its message is the payload, its detail the channel.
create function threadline.wake (p_channel text, p_payload text) returns void
  language plpgsql
as $$
begin
  if p_channel = 'threadline_changes' and not threadline.feed_followed() then
    return;
  end if;
  if current_setting('threadline.wakes_after_commit', true) = 'on' then
    raise notice using message = p_payload, detail = p_channel, errcode = 'TLW01';
  else
    perform pg_notify(p_channel, p_payload);
  end if;
end;
$$;

create function threadline.send_wakes (p_channels text[], p_payloads text[]) returns void
  language plpgsql
as $$
begin
  perform set_config('synchronous_commit', 'off', true);  -- holds the notify lock for no flush
  perform pg_notify(w.channel, w.payload)
     from unnest(p_channels, p_payloads) as w (channel, payload);
end;
$$;

-- Every function of Threadline's that notified now wakes instead: the same definitions with
-- pg_notify( replaced by threadline.wake( (child_finished, announce_change, release_wait,
-- emit_step_done, admit_run, send_entry). tests/integration/test_wakes.py checks that no other
-- function of the schema calls pg_notify.
do $$
declare
  v_fn regprocedure;
  v_def text;
begin
  for v_fn in
    select p.oid::regprocedure
      from pg_proc p
     where p.pronamespace = 'threadline'::regnamespace
       and p.prosrc like '%pg_notify(%'
       and p.proname not in ('wake', 'send_wakes')
  loop
    v_def := pg_get_functiondef(v_fn);
    execute replace(v_def, 'pg_notify(', 'threadline.wake(');
  end loop;
end;
$$;
