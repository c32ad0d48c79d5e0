-- Webhook triggers and deliveries (served by `threadline hooks`).

-- Which workflow each webhook path starts. Kept by the database itself from workflows.recipe, so
-- every writer of a workflow row keeps it right, and two workflows can never hold one path, even
-- when they are applied at the same moment (the primary key decides).
create table threadline.webhook_triggers (
  path     text primary key,
  workflow text not null references threadline.workflows (slug) on delete cascade,
  secret   text,  -- "env:NAME": the ingress's environment variable holding it, never the secret
  map      jsonb  -- payload field -> "$.a.b" expression; null: the whole body is the payload
);
create index webhook_triggers_workflow on threadline.webhook_triggers (workflow);

create function threadline.sync_webhook_triggers ()
  returns trigger
  language plpgsql
as $$
declare
  v_hook jsonb;
  v_index bigint;
  v_owner text;
begin
  delete from threadline.webhook_triggers where workflow = new.slug;
  for v_hook, v_index in
    select value, ordinality - 1
      from jsonb_array_elements(coalesce(new.recipe -> 'webhooks', '[]'::jsonb)) with ordinality
  loop
    insert into threadline.webhook_triggers (path, workflow, secret, map)
    values (v_hook ->> 'path', new.slug, v_hook ->> 'secret', v_hook -> 'map')
    on conflict (path) do nothing;
    if not found then
      select workflow into v_owner from threadline.webhook_triggers where path = v_hook ->> 'path';
      raise exception 'webhooks[%].path: "%" is already used by workflow "%"',
        v_index, v_hook ->> 'path', v_owner
        using errcode = 'unique_violation', constraint = 'webhook_triggers_pkey';
    end if;
  end loop;
  return null;
end;
$$;

create trigger workflows_webhook_triggers
  after insert or update of recipe on threadline.workflows
  for each row execute function threadline.sync_webhook_triggers();

-- One row per accepted delivery. A retry names the same delivery id; a captured request resent
-- under a new delivery id, or to another path, carries the same signature: either way it finds
-- the first delivery. Signatures are unique across paths (several paths may share a secret).
create table threadline.webhook_deliveries (
  path        text not null,
  delivery    text not null,
  signature   text,
  run_id      uuid not null references threadline.run_threads (run_id),
  caller      text,
  received_at timestamptz not null default now(),
  primary key (path, delivery)
);
create unique index webhook_deliveries_signature on threadline.webhook_deliveries (signature)
  where signature is not null;
