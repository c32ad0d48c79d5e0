-- insert_api_token --
insert into threadline.api_tokens (token_hash, name, roles, created_by)
values (%(token_hash)s, %(name)s, %(roles)s, %(created_by)s)

-- api_token_by_hash --
-- A presented bearer token's identity, while it is not revoked; marks it used.
update threadline.api_tokens set last_used_at = now()
 where token_hash = %(token_hash)s and revoked_at is null
returning name, roles

-- list_api_tokens --
select name, roles, created_by, created_at, revoked_at, last_used_at
  from threadline.api_tokens order by name

-- revoke_api_token --
update threadline.api_tokens set revoked_at = now()
 where name = %(name)s and revoked_at is null
returning name
