-- `wait_for_event` steps: a run waits mid-way for an outside event (by name, with a correlation
-- key), holding no process. Every delivered event is kept, so one that arrives before the run
-- reaches its step is not lost: the step finds it when it starts. A wait ends once: the first of
-- an event, its timeout, or another of the names it waits for.

alter table threadline.run_threads drop constraint run_threads_await_kind_check;
alter table threadline.run_threads add constraint run_threads_await_kind_check
  check (await_kind in ('bot', 'gate', 'event'));

create table threadline.outside_events (
  id          bigserial primary key,
  name        text not null,
  key         text,
  event_id    text not null,
  payload     jsonb not null,
  source      jsonb,
  received_at timestamptz not null default now(),
  unique (name, event_id)
);
create index outside_events_lookup on threadline.outside_events (name, key, received_at);

create table threadline.event_waits (
  step_key   text primary key,
  run_id     uuid not null references threadline.run_threads (run_id),
  names      text[] not null,
  key        text,
  since      timestamptz not null,  -- the run's start: events from then on count
  created_at timestamptz not null default now()
);
create index event_waits_names on threadline.event_waits using gin (names);

-- One lock per (name, key): delivery and registration of a wait for it are serialised, so a
-- wait registered while an event is delivered sees it, one way or the other.
create function threadline.lock_event (p_name text, p_key text) returns void
  language sql
as $$
  select pg_advisory_xact_lock(7412, hashtext(p_name || chr(31) || coalesce(p_key, '')));
$$;

-- End a wait (once): its step's done event, `awaiting` cleared, a wake-up. False if it had ended.
create function threadline.release_wait (p_queue text, p_step_key text, p_payload jsonb)
  returns boolean
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  v_run uuid;
begin
  perform threadline.require_caller(array['conductor', 'console', 'hooks'], 'ending a wait');
  delete from threadline.event_waits where step_key = p_step_key returning run_id into v_run;
  if v_run is null then
    return false;
  end if;
  perform absurd.emit_event(p_queue, 'threadline.step.done:' || p_step_key, p_payload);
  update threadline.run_threads
     set awaiting = false, last_emitted_key = p_step_key, updated_at = now()
   where run_id = v_run and await_key = p_step_key and awaiting;
  perform pg_notify('threadline', 'step.done:' || v_run);
  return true;
end;
$$;

-- Deliver an outside event: keep it, and end every wait for its name and key. Idempotent per
-- (name, event id). Returns the step keys it released.
create function threadline.deliver_event (p_queue text, p_name text, p_key text,
                                          p_event_id text, p_payload jsonb, p_source jsonb)
  returns text[]
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  v_event threadline.outside_events;
  v_wait record;
  v_released text[] := '{}';
begin
  perform threadline.require_caller(array['console', 'hooks', 'conductor'], 'delivering an event');
  perform threadline.lock_event(p_name, p_key);
  insert into threadline.outside_events (name, key, event_id, payload, source)
  values (p_name, p_key, p_event_id, p_payload, p_source)
  on conflict (name, event_id) do nothing
  returning * into v_event;
  if v_event.id is null then
    return v_released;  -- delivered before: it released what it could then
  end if;
  for v_wait in
    select step_key from threadline.event_waits
     where p_name = any (names) and key is not distinct from p_key
       and since <= v_event.received_at
     order by created_at
     for update
  loop
    if threadline.release_wait(p_queue, v_wait.step_key, threadline.event_result(v_event)) then
      v_released := v_released || v_wait.step_key;
    end if;
  end loop;
  return v_released;
end;
$$;

-- What a wait_for_event step returns: the event's name, id and payload.
create function threadline.event_result (p_event threadline.outside_events) returns jsonb
  language sql immutable
as $$
  select jsonb_build_object('status', 'completed', 'output', p_event.payload,
                            'event', p_event.name, 'event_id', p_event.event_id,
                            'key', p_event.key, 'received_at', p_event.received_at);
$$;

-- A wait_for_event step starts waiting (the conductor, in its SEND). An event of one of its
-- names and its key received since the run started ends it at once. Idempotent per step key.
create function threadline.register_wait (p_queue text, p_run_id uuid, p_step_key text,
                                          p_names text[], p_key text)
  returns boolean
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  v_name text;
  v_since timestamptz;
  v_event threadline.outside_events;
begin
  perform threadline.require_caller(array['conductor'], 'registering a wait');
  for v_name in select distinct n from unnest(p_names) n order by 1 loop
    perform threadline.lock_event(v_name, p_key);
  end loop;
  select created_at into v_since from threadline.run_threads where run_id = p_run_id;
  insert into threadline.event_waits (step_key, run_id, names, key, since)
  values (p_step_key, p_run_id, p_names, p_key, v_since)
  on conflict (step_key) do nothing;
  if not found then
    return false;  -- a replay: registered (and perhaps released) already
  end if;
  select * into v_event from threadline.outside_events
   where name = any (p_names) and key is not distinct from p_key and received_at >= v_since
   order by id limit 1;
  if v_event.id is not null then
    return threadline.release_wait(p_queue, p_step_key, threadline.event_result(v_event));
  end if;
  return false;
end;
$$;

revoke all on function threadline.release_wait (text, text, jsonb),
  threadline.deliver_event (text, text, text, text, jsonb, jsonb),
  threadline.register_wait (text, uuid, text, text[], text) from public;
grant execute on function threadline.release_wait (text, text, jsonb),
  threadline.deliver_event (text, text, text, text, jsonb, jsonb)
  to threadline_conductor, threadline_console, threadline_hooks;
grant execute on function threadline.register_wait (text, uuid, text, text[], text)
  to threadline_conductor;
grant select on threadline.outside_events, threadline.event_waits
  to threadline_viewer, threadline_console, threadline_conductor;
