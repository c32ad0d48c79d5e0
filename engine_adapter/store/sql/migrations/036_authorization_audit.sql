-- Every refused action, and every state change a person was allowed, as the one authorization
-- layer (engine_adapter/access/authorization.py) decided it: who (the account's name, its id where the
-- door proved it, the label the thread shows), through which door, what action on what target,
-- the outcome and why. Written only through threadline.audit_authorization, by the people's
-- doors (the console's role, which the CLI and the HTTP API use too) and the owner's login (an
-- admin's token mint); the conductor, the bots, the ingress and the viewer write none.
create table threadline.authorization_audit (
  id bigint generated always as identity primary key,
  actor text not null,
  account_id bigint,
  label text not null,
  door text not null,
  action text not null,
  run_id uuid,
  workflow text,
  detail jsonb,
  outcome text not null check (outcome in ('allowed', 'refused')),
  reason text,
  created_at timestamptz not null default now(),
  check (outcome = 'allowed' or reason is not null)
);
create index authorization_audit_run on threadline.authorization_audit (run_id)
  where run_id is not null;

create function threadline.audit_authorization (p_row jsonb) returns void
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  if threadline.caller_kind() not in ('owner', 'console') then
    perform threadline.refuse('auditing an authorization');
  end if;
  insert into threadline.authorization_audit
    (actor, account_id, label, door, action, run_id, workflow, detail, outcome, reason)
  values (p_row ->> 'actor', (p_row ->> 'account_id')::bigint, p_row ->> 'label',
          p_row ->> 'door', p_row ->> 'action', (p_row ->> 'run_id')::uuid,
          p_row ->> 'workflow', p_row -> 'detail', p_row ->> 'outcome', p_row ->> 'reason');
end;
$$;
revoke all on function threadline.audit_authorization (jsonb) from public;
grant execute on function threadline.audit_authorization (jsonb) to threadline_console;
grant select on threadline.authorization_audit to threadline_console, threadline_viewer;
