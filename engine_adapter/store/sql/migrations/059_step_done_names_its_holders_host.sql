-- A step's done wake-up names the host of the conductor holding its run, if one does.
--
-- A process whose host also runs a conductor (or a bots process) hands its wake-ups to it
-- directly, through the host's meeting directory (store/meeting.py), instead of a NOTIFY: a
-- commit to send it and one in the host's listening backend to read it, per wake-up. But a run a
-- conductor holds for its done event (wakeups.Holds) must hear it on the holder's host, which may
-- be another: so the notice of a step's done wake-up says, in its hint, the host of the conductor
-- that holds the run (claimed it and has not parked it), and the wake-up stays local only there.

-- Migration 030's wake-up, with the holder's host to name (or none). One function, not an
-- overload beside the old one: every caller of the old one reaches this one unchanged.
drop function threadline.wake (text, text);
create function threadline.wake (p_channel text, p_payload text, p_holder_host text default null)
  returns void
  language plpgsql
as $$
begin
  if p_channel = 'threadline_changes' and not threadline.feed_followed() then
    return;
  end if;
  if current_setting('threadline.wakes_after_commit', true) = 'on' then
    raise notice using message = p_payload, detail = p_channel, hint = coalesce(p_holder_host, ''),
                       errcode = 'TLW01';
  else
    perform pg_notify(p_channel, p_payload);
  end if;
end;
$$;
revoke all on function threadline.wake (text, text, text) from public;
grant execute on function threadline.wake (text, text, text)
  to threadline_conductor, threadline_bots, threadline_console, threadline_hooks;

-- Migration 013's function, its wake-up naming the holder's host.
create or replace function threadline.emit_step_done (p_queue text, p_run_id uuid,
    p_step_key text, p_payload jsonb)
  returns void
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  v_caller text := threadline.caller_kind();
  v_run record;
  v_holder_host text;
begin
  if v_caller not in ('owner', 'conductor') then
    select await_key, await_kind into v_run from threadline.run_threads where run_id = p_run_id;
    if v_run.await_key is distinct from p_step_key
       or (v_caller = 'bots' and v_run.await_kind is distinct from 'bot')
       or (v_caller in ('console', 'hooks') and (v_run.await_kind is distinct from 'gate'
           or not exists (select 1 from threadline.decisions where step_key = p_step_key)))
       or (v_caller = 'hooks' and not threadline.token_used_for(p_step_key))
       or v_caller not in ('bots', 'console', 'hooks') then
      perform threadline.refuse(format('releasing step %s', p_step_key));
    end if;
  end if;
  perform absurd.emit_event(p_queue, 'threadline.step.done:' || p_step_key, p_payload);
  update threadline.run_threads
     set awaiting = false, last_emitted_key = p_step_key, updated_at = now()
   where run_id = p_run_id and await_key = p_step_key and awaiting;
  execute format('select w.host from absurd.%I r join threadline.workers w on w.id = r.claimed_by
                   where r.task_id = $1 and r.state = ''running''', 'r_' || p_queue)
     into v_holder_host using p_run_id;
  perform threadline.wake('threadline', 'step.done:' || p_run_id, v_holder_host);
end;
$$;
