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
