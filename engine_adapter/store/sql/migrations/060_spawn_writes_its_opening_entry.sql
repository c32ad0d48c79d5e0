-- A spawn writes its run's opening entry itself, and asks who its caller is once.
--
-- spawn_run wrote the opening entry through append_entry, whose checks (the caller may write a
-- system entry; a console's caller has signed in) every caller that reaches that line has passed
-- already, and which then updated the just-inserted run's row for the entry's number: a row
-- version more, and a quarter of a spawn's server time. The run's row now starts with the number
-- after the opening entry's, and the entry is a plain insert. The caller's kind was looked up twice
-- (the console's check asked again); it is asked once. docs/speed.md has the figures.

-- Migration 032's function (with migration 045's console check), so changed.
create or replace function threadline.spawn_run (
  p_queue text, p_task text, p_handler_v integer, p_options jsonb,
  p_workflow text, p_version integer, p_hash text,
  p_payload jsonb, p_trigger jsonb, p_idempotency_key text, p_initiator text, p_opening text,
  p_child jsonb default null,     -- a child run: its place in the parent and what it inherits
  p_snapshot jsonb default null,  -- {recipe, version, hash} run instead of the workflow's
  p_carried jsonb default null    -- a rerun: the results it takes over
)
  returns table (run_id uuid, created boolean, state text)
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
  v_caller text := threadline.caller_kind();
  v_wf threadline.workflows;
  v_recipe jsonb;
  v_version integer;
  v_hash text;
  v_limited boolean;
  v_params jsonb;
  v_run uuid;
  v_created boolean;
  v_agent jsonb;
  v_parent uuid := (p_child ->> 'run_id')::uuid;
begin
  if v_caller = 'console' and (p_trigger ->> 'caller') is distinct from
       (threadline.console_actor(array['spawn', 'rerun'], 'starting a run') ->> 'name') then
    perform threadline.refuse('starting a run in the name of ' || (p_trigger ->> 'caller'));
  end if;
  if v_caller not in ('owner', 'conductor', 'console', 'hooks') then
    perform threadline.refuse('starting a run');
  end if;
  select * into v_wf from threadline.workflows w where w.slug = p_workflow;
  if v_wf.slug is null then
    raise exception 'no workflow "%"', p_workflow using errcode = 'TLS01';
  end if;
  if v_caller = 'hooks' and not coalesce(
       p_child is null and p_snapshot is null and p_carried is null
       and jsonb_typeof(p_payload) = 'object'
       and case p_trigger ->> 'kind'
         when 'webhook' then
           exists (select 1 from jsonb_array_elements(v_wf.recipe -> 'webhooks') h
                    where h ->> 'path' = p_trigger ->> 'path' and h ->> 'event' is null)
           and p_idempotency_key
               = format('webhook:%s:%s', p_trigger ->> 'path', p_trigger ->> 'delivery')
         when 'event' then
           v_wf.recipe ->> 'on_event' = p_trigger ->> 'event'
           and threadline.webhook_delivers(p_trigger ->> 'event', p_trigger ->> 'event_id')
           and p_idempotency_key = format('event:%s:%s:%s', p_trigger ->> 'event',
                                          p_trigger ->> 'event_id', p_workflow)
         else false
       end, false) then
    perform threadline.refuse(format('starting a run of workflow %s by %s %s', p_workflow,
      coalesce(p_trigger ->> 'kind', 'an unknown trigger'),
      coalesce(p_trigger ->> 'path', p_trigger ->> 'event', '')));
  end if;

  if p_snapshot is not null then  -- a version of its own, whatever the workflow is now
    v_recipe := p_snapshot -> 'recipe';
    v_version := (p_snapshot ->> 'version')::integer;
    v_hash := p_snapshot ->> 'hash';
  elsif v_wf.version is distinct from p_version or v_wf.hash is distinct from p_hash then
    raise exception 'workflow "%" is at version %, not %', p_workflow, v_wf.version, p_version
      using errcode = 'TLS04';
  else
    v_recipe := v_wf.recipe;
    v_version := v_wf.version;
    v_hash := v_wf.hash;
  end if;
  if (p_child is null or p_snapshot is null) and not v_wf.enabled then
    raise exception 'workflow "%" is disabled', p_workflow using errcode = 'TLS02';
  end if;

  -- Under a concurrency cap the handler awaits admission before its first step; a child run
  -- never waits (its parent holds the place).
  v_limited := p_child is null
    and (coalesce(jsonb_typeof(v_recipe -> 'max_concurrent_runs'), 'null') <> 'null'
         or exists (select 1 from threadline.run_limits));
  v_params := jsonb_build_object('v', p_handler_v, 'workflow', p_workflow, 'recipe', v_recipe,
                                 'payload', p_payload);
  if p_child is not null then
    v_params := v_params || jsonb_build_object('inherited',
                                               coalesce(p_child -> 'inherited', '{}'::jsonb));
  end if;
  if p_carried is not null then
    v_params := v_params || jsonb_build_object('carried', p_carried);
  end if;
  if v_limited then
    v_params := v_params || '{"admit": true}'::jsonb;
  end if;
  select t.task_id, t.created into v_run, v_created
    from absurd.spawn_task(p_queue, p_task, v_params, jsonb_strip_nulls(jsonb_build_object(
           'max_attempts', p_options -> 'max_attempts',
           'retry_strategy', p_options -> 'retry_strategy',
           'idempotency_key', 'spawn:' || p_idempotency_key))) t;
  if not v_created then
    return query select v_run, false, (select r.state from threadline.run_threads r
                                        where r.run_id = v_run);
    return;
  end if;
  -- While paused, no new run (the refusal rolls the new task back); a run in flight may still
  -- start its branches and sub-workflows.
  if p_child is null and exists (select 1 from threadline.pause) then
    raise exception 'Threadline is paused: new runs are refused' using errcode = 'TLS03';
  end if;

  -- The agent settings the run keeps for its life: a child run of its parent's bot takes the
  -- parent's (its run started under them), any other run its bot's as they are now.
  if v_parent is not null then
    select r.agent into v_agent from threadline.run_threads r
     where r.run_id = v_parent and r.bot = v_wf.bot and r.agent is not null;
  end if;
  v_agent := coalesce(v_agent, threadline.agent_snapshot(v_wf.bot));
  -- The run with its opening entry, number 1: the entry written here, not through
  -- append_entry, whose checks every caller that reaches this line has passed.
  insert into threadline.run_threads
    (run_id, workflow, workflow_version, recipe_hash, recipe, payload, bot, trigger,
     idempotency_key, initiator, agent, parent_run_id, parent, next_seq)
  values (v_run, p_workflow, v_version, v_hash, v_recipe, p_payload, v_wf.bot, p_trigger,
          p_idempotency_key, case when p_child is null then p_initiator end, v_agent, v_parent,
          p_child - 'inherited', 2);
  insert into threadline.thread_entries
    (run_id, seq, author_kind, author, kind, step_key, dedupe_key, text, data)
  values (v_run, 1, 'system', 'threadline', 'note', null, 'opened', p_opening,
          jsonb_build_object('trigger', p_trigger, 'payload', p_payload));
  if v_limited then
    perform threadline.queue_run(v_run, p_workflow);
    perform threadline.admit_queued(p_queue, p_workflow);
  end if;
  perform threadline.wake('threadline', 'spawn:' || v_run);
  return query select v_run, true, r.state from threadline.run_threads r where r.run_id = v_run;
end;
$$;
