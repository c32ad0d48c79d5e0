-- An instruction wakes a bot process only when no other instruction for its bot already waits.
--
-- Every SEND of a bot step woke a bots process: a notification to send after the commit (a
-- commit of its own) and one read of it in the host's listening backend (another), two commits
-- of the three a step's wake-ups cost. Under load the wake-up did nothing: every slot was busy,
-- and a slot claims again as soon as its step is reported, so the instruction was taken by a
-- claim that needed no wake-up.
--
-- The SEND now skips the wake-up when an older instruction for the same bot is still free to
-- claim (no live claim, no completed attempt, no backoff): a wake-up for that one went out, or
-- a slot is busy and claims again when done, and the claim that takes it sees this one as its
-- second free step, which wakes another slot of its process (claim_step's `more`). A
-- wake-up can still go missing when the older step is claimed between this check and this
-- commit (that claim cannot see this step, so it wakes no other slot): then a slot takes the
-- step when it claims again after its own step, or at the process's poll, within a second.
-- The check reads the same partial index as claim_step and stops at the first free step; with
-- nothing waiting it reads only the steps in progress.
--
-- send_entry says so (`queued`): an executor that meant to hold the run for its step's done
-- event (wakeups.Holds) parks it in the SEND's transaction instead, as a step that waits
-- behind others will not be done within a hold.
create function threadline.bot_step_waiting (p_run_id uuid) returns boolean
  language sql
  stable
  security definer
  set search_path = pg_catalog, pg_temp
as $$
  select exists (
    select 1
      from threadline.run_threads rt
     where rt.state = 'running' and rt.await_kind = 'bot' and rt.awaiting
       and rt.run_id <> p_run_id
       and rt.bot = (select me.bot from threadline.run_threads me where me.run_id = p_run_id)
       and threadline.step_key_free(rt.await_key))
$$;

revoke all on function threadline.bot_step_waiting (uuid) from public;
grant execute on function threadline.bot_step_waiting (uuid) to threadline_conductor;

drop function threadline.send_entry (uuid, text, text, text, jsonb, text, text, integer, text,
                                     text, text);
create function threadline.send_entry (
  p_run_id uuid, p_kind text, p_text text, p_step_key text, p_data jsonb, p_state text,
  p_step text, p_try integer, p_await_kind text, p_channel text, p_wake text,
  out seq integer, out queued boolean
)
  language plpgsql
  set search_path = pg_catalog, pg_temp
as $$
begin
  seq := threadline.append_entry(p_run_id, 'system', 'threadline', p_kind, p_step_key,
                                 p_kind || ':' || p_step_key, p_text, p_data);
  if seq is not null then
    perform threadline.set_run_state(p_run_id, p_state, p_step, p_try, p_step_key, p_await_kind,
                                     null);
  end if;
  queued := p_await_kind is not distinct from 'bot' and threadline.bot_step_waiting(p_run_id);
  if p_channel is not null and not queued then
    perform threadline.wake(p_channel, p_wake);
  end if;
end;
$$;

revoke all on function threadline.send_entry (uuid, text, text, text, jsonb, text, text, integer,
                                              text, text, text) from public;
grant execute on function threadline.send_entry (uuid, text, text, text, jsonb, text, text,
                                                 integer, text, text, text)
  to threadline_conductor;
