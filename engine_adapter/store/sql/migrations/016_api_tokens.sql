-- Bearer tokens of the HTTP API: `threadline token create NAME --role R` prints one once; only
-- its sha256 is kept. A call made with it acts as NAME with the token's roles.
create table threadline.api_tokens (
  token_hash   text primary key,
  name         text not null unique,
  roles        text[] not null check (roles <@ array['viewer', 'operator', 'approver']
                                      and cardinality(roles) > 0),
  created_by   text not null,
  created_at   timestamptz not null default now(),
  revoked_at   timestamptz,
  last_used_at timestamptz
);

grant select, insert, update (revoked_at, last_used_at) on threadline.api_tokens
  to threadline_console;
