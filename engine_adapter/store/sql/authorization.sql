-- insert_authorization_audit --
-- One decision of the authorization layer, through threadline.audit_authorization (migration 036).
select threadline.audit_authorization(jsonb_build_object(
  'actor', %(actor)s::text, 'account_id', %(account_id)s::bigint, 'label', %(label)s::text,
  'door', %(door)s::text, 'action', %(action)s::text, 'run_id', %(run_id)s::text,
  'workflow', %(workflow)s::text, 'detail', %(detail)s::jsonb, 'outcome', %(outcome)s::text,
  'reason', %(reason)s::text))

-- authorization_audit_since --
-- The layer's decisions after an id, oldest first (tests and `threadline show`'s readers).
select id, actor, account_id, label, door, action, run_id, workflow, detail, outcome, reason,
       created_at
  from threadline.authorization_audit where id > %(after)s order by id

-- upsert_action_rules --
-- authorization.RULES, as the database's checked functions read it (migration 045): the rules
-- given (a jsonb array of rows) replace those held.
with given as (
  select * from jsonb_to_recordset(%(rules)s::jsonb)
    as r(action text, verb text, roles text[], admin boolean, admin_for_others boolean)
), gone as (
  delete from threadline.action_rules a where not exists (
    select 1 from given g where g.action = a.action)
)
insert into threadline.action_rules (action, verb, roles, admin, admin_for_others)
select action, verb, roles, admin, admin_for_others from given
on conflict (action) do update
  set verb = excluded.verb, roles = excluded.roles, admin = excluded.admin,
      admin_for_others = excluded.admin_for_others

-- action_rules --
-- The rules the database holds (a test compares them with authorization.RULES).
select action, verb, roles, admin, admin_for_others from threadline.action_rules order by action

-- authenticate --
-- The person a credential is, if allowed the action (migration 045); kept as the transaction's.
select threadline.authenticate(%(credential)s::text, %(action)s::text, %(account)s::text) as actor
