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
