-- The named queries of engine_adapter.access: a block is `-- name --`, a comment line, then
-- the query (store/db.py loads every part's queries.sql; a name is unique across them).

-- live_account --
-- The account a name stands for now (none once removed).
select id, name from threadline.accounts where name = %(name)s and removed_at is null

-- account_was_removed --
-- Whether a name had an account that was removed: first use does not bring it back.
select exists (select 1 from threadline.accounts where name = %(name)s and removed_at is not null)
  as removed

-- insert_account --
-- A new account; nothing when a live one of that name exists (two first uses at once).
insert into threadline.accounts (name, created_by) values (%(name)s, %(created_by)s)
on conflict (name) where removed_at is null do nothing
returning id, name

-- remove_account --
update threadline.accounts set removed_at = now(), removed_by = %(removed_by)s
 where name = %(name)s and removed_at is null
returning id

-- revoke_account_tokens --
-- A removed account's tokens stop at once (they would find no account anyway).
update threadline.api_tokens set revoked_at = now()
 where account_id = %(account_id)s and revoked_at is null
returning name

-- live_accounts_named --
select id, name from threadline.accounts where name = any (%(names)s) and removed_at is null

-- list_accounts --
-- Live accounts with their channels and how many live tokens act for them.
select a.id, a.name, a.created_by, a.created_at,
       coalesce((select json_agg(json_build_object('channel', c.channel, 'target', c.target)
                                 order by c.channel, c.target)
                   from threadline.account_channels c where c.account_id = a.id), '[]') as channels,
       (select count(*) from threadline.api_tokens t
         where t.account_id = a.id and t.revoked_at is null) as tokens
  from threadline.accounts a
 where a.removed_at is null
 order by a.name

-- insert_account_channel --
insert into threadline.account_channels (account_id, channel, target, added_by)
values (%(account_id)s, %(channel)s, %(target)s, %(added_by)s)
on conflict do nothing
returning account_id

-- delete_account_channel --
delete from threadline.account_channels
 where account_id = %(account_id)s and channel = %(channel)s and target = %(target)s
returning account_id

-- channels_of_accounts --
-- Where the named live accounts hear of things, in the order their names are given.
select a.name, c.channel, c.target
  from threadline.accounts a
  join threadline.account_channels c on c.account_id = a.id
 where a.name = any (%(names)s) and a.removed_at is null
 order by array_position(%(names)s, a.name), c.channel, c.target

-- channel_registered --
-- Whether target is a channel the live account `name` registered: where its links may go.
select exists (
  select 1 from threadline.accounts a
    join threadline.account_channels c on c.account_id = a.id
   where a.name = %(name)s and a.removed_at is null
     and c.channel = %(channel)s and c.target = %(target)s
) as registered

-- insert_api_token --
-- A new token, through threadline.mint_api_token (migration 032): the console's role mints only
-- a token an account mints for itself.
select threadline.mint_api_token(jsonb_build_object(
  'token_hash', %(token_hash)s::text, 'name', %(name)s::text, 'roles', %(roles)s::text[],
  'created_by', %(created_by)s::text, 'account_id', %(account_id)s::bigint,
  'minted_by', %(minted_by)s::bigint))

-- api_token_account --
-- A presented bearer token's account, while neither it is revoked nor its account removed; and
-- who minted it. Marks it used (migration 045's function: the token is hashed there).
select name, account_id, roles, minted_by, minter_id
  from threadline.api_token_account(%(token)s::text)

-- list_api_tokens --
select t.name, a.name as account, t.roles, m.name as minted_by, t.created_at, t.revoked_at,
       t.last_used_at
  from threadline.api_tokens t
  left join threadline.accounts a on a.id = t.account_id
  left join threadline.accounts m on m.id = t.minted_by
 order by t.name, t.created_at

-- live_api_token --
select t.name, a.name as account
  from threadline.api_tokens t left join threadline.accounts a on a.id = t.account_id
 where t.name = %(name)s and t.revoked_at is null

-- revoke_api_token --
update threadline.api_tokens set revoked_at = now()
 where name = %(name)s and revoked_at is null
returning name

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

-- review_proposal --
select threadline.review_proposal(%(id)s, %(status)s, %(actor)s, %(note)s)
