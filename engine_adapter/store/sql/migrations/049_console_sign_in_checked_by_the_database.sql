-- Opening a console session is checked by the database, not trusted to the console (issue 22).
--
-- Until now the console checked a sign-in link (a file of hashes in the home) or a password (a
-- users file of scrypt hashes) itself and then told open_console_session whom to sign in, with
-- which roles: whoever held the console's login could open a session as any account, admin's
-- included. Now the proof itself is presented, and checked here:
--
--   * A sign-in link is a row of threadline.console_links: only the SHA-256 of its token, the
--     account and roles it signs in and its expiry, inserted by the owner (`threadline up` and
--     `threadline console link`). No process login reads or writes the table; a link is used
--     once, unexpired, by open_console_session alone.
--   * A password's verifier is a row of threadline.console_passwords, written by the owner
--     (`threadline console user add`) with the account's roles. The scheme is PBKDF2-HMAC-SHA256
--     (RFC 8018), built here from PostgreSQL's own sha256(): pgcrypto (whose crypt() with bf
--     would do) is not shipped by every server, the embedded one included
--     (pg_available_extensions has no pgcrypto). A random 16-byte salt per verifier and 100,000
--     iterations (about 0.2 s a check on a small machine; NIST SP 800-132 asks at least 1,000,
--     OWASP's 2023 advice for this hash is higher, and the count is kept in each verifier, so a
--     later password set may raise it without breaking the ones kept): `pbkdf2-sha256$<n>$<salt,
--     base64>$<key, base64>`. The result equals Python's hashlib.pbkdf2_hmac (a test holds them
--     equal).
--   * Sign-in without a proof ('no-auth') is only for the account an owner-set row of
--     threadline.console_no_auth names (`threadline up --no-auth` sets it, a start with sign-in
--     on clears it); without the row it is refused.
--   * The roles of a session come from the link's or the password's row, never from the caller.
--     A refused proof changes nothing: the function raises before any row is written, so no
--     session is opened and no link is used.

create table threadline.console_links (
  token_hash  text primary key,  -- sha256 (hex) of the token the link carries
  account     text not null check (account ~ '^[A-Za-z0-9_.@-]{1,100}$'),
  roles       text[] not null check (roles <@ array['viewer', 'operator', 'approver']),
  minted_by   text not null,
  minted_at   timestamptz not null default now(),
  expires_at  timestamptz not null,
  used_at     timestamptz
);
create index console_links_expiry on threadline.console_links (expires_at);

create table threadline.console_passwords (
  account   text primary key check (account ~ '^[A-Za-z0-9_.@-]{1,100}$'),
  verifier  text not null check (verifier ~ '^pbkdf2-sha256\$[0-9]+\$[A-Za-z0-9+/=]+\$[A-Za-z0-9+/=]+$'),
  roles     text[] not null check (cardinality(roles) > 0
                                   and roles <@ array['viewer', 'operator', 'approver']),
  set_by    text not null,
  set_at    timestamptz not null default now()
);

create table threadline.console_no_auth (
  only_row  boolean primary key default true check (only_row),
  account   text not null,
  set_by    text not null,
  set_at    timestamptz not null default now()
);

-- PBKDF2-HMAC-SHA256 with a 32-byte key (one block). HMAC's inner and outer pads are made once;
-- the blocks are xored as bit strings.
create function threadline.pbkdf2_sha256 (p_password text, p_salt bytea, p_iterations integer)
  returns bytea
  language plpgsql immutable strict
  set search_path = pg_catalog, pg_temp
as $$
declare
  v_key bytea := convert_to(p_password, 'UTF8');
  v_ikey bytea;
  v_okey bytea;
  v_u bytea;
  v_acc bit(256);
begin
  if p_iterations not between 1 and 10000000 then
    raise exception 'pbkdf2: % iterations is out of range', p_iterations using errcode = '22023';
  end if;
  if length(v_key) > 64 then
    v_key := sha256(v_key);
  end if;
  v_key := v_key || decode(repeat('00', 64 - length(v_key)), 'hex');
  v_ikey := v_key;
  v_okey := v_key;
  for i in 0 .. 63 loop
    v_ikey := set_byte(v_ikey, i, get_byte(v_key, i) # 54);  -- 0x36
    v_okey := set_byte(v_okey, i, get_byte(v_key, i) # 92);  -- 0x5c
  end loop;
  v_u := sha256(v_okey || sha256(v_ikey || p_salt || '\x00000001'::bytea));
  v_acc := ('x' || encode(v_u, 'hex'))::bit(256);
  for i in 2 .. p_iterations loop
    v_u := sha256(v_okey || sha256(v_ikey || v_u));
    v_acc := v_acc # ('x' || encode(v_u, 'hex'))::bit(256);
  end loop;
  return decode((select string_agg(lpad(to_hex(substring(v_acc from 64 * k + 1 for 64)::bit(64)
                                                 ::bigint), 16, '0'), '' order by k)
                   from generate_series(0, 3) k), 'hex');
end;
$$;

-- A new verifier of p_password (a fresh salt).
create function threadline.password_verifier (p_password text, p_iterations integer default 100000)
  returns text
  language plpgsql volatile strict
  set search_path = pg_catalog, pg_temp
as $$
declare
  -- gen_random_uuid draws from the server's strong random source (122 random bits each).
  v_salt bytea := substring(sha256(uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid()))
                            from 1 for 16);
begin
  if p_password = '' then
    raise exception 'password: empty' using errcode = '22023';
  end if;
  return format('pbkdf2-sha256$%s$%s$%s', p_iterations, encode(v_salt, 'base64'),
                encode(threadline.pbkdf2_sha256(p_password, v_salt, p_iterations), 'base64'));
end;
$$;

-- Whether p_password matches p_verifier (false for a malformed verifier).
create function threadline.password_matches (p_password text, p_verifier text) returns boolean
  language plpgsql immutable strict
  set search_path = pg_catalog, pg_temp
as $$
declare
  v_parts text[] := string_to_array(p_verifier, '$');
begin
  if cardinality(v_parts) <> 4 or v_parts[1] <> 'pbkdf2-sha256' or v_parts[2] !~ '^[0-9]{1,8}$'
  then
    return false;
  end if;
  return threadline.pbkdf2_sha256(p_password, decode(v_parts[3], 'base64'), v_parts[2]::integer)
         = decode(v_parts[4], 'base64');
end;
$$;

-- The owner sets (or replaces) an account's password and roles; that account's password sessions
-- end (a new password or narrower roles hold at once).
create function threadline.set_console_password (
  p_account text, p_password text, p_roles text[], p_set_by text
) returns void
  language plpgsql
  set search_path = pg_catalog, pg_temp
as $$
begin
  if coalesce(p_password, '') = '' then
    raise exception 'password: empty' using errcode = '22023';
  end if;
  insert into threadline.console_passwords (account, verifier, roles, set_by)
  values (p_account, threadline.password_verifier(p_password),
          array(select distinct r from unnest(p_roles) r order by 1), p_set_by)
  on conflict (account) do update
    set verifier = excluded.verifier, roles = excluded.roles, set_by = excluded.set_by,
        set_at = now();
  update threadline.console_sessions s set closed_at = now()
   where s.account = p_account and s.via = 'password' and s.closed_at is null;
end;
$$;

-- The owner removes an account's password; its password sessions end. Returns whether it had one.
create function threadline.remove_console_password (p_account text) returns boolean
  language plpgsql
  set search_path = pg_catalog, pg_temp
as $$
begin
  update threadline.console_sessions s set closed_at = now()
   where s.account = p_account and s.via = 'password' and s.closed_at is null;
  delete from threadline.console_passwords p where p.account = p_account;
  return found;
end;
$$;

drop function threadline.open_console_session (text, text, text[], text, integer);

-- A new console session, for the account (and with the roles) a proof names, checked here:
-- 'token': p_secret is a sign-in link's token (used once, unexpired; p_account, if given, must be
-- its account); 'password': p_account and its password p_secret; 'no-auth': the account the
-- owner let sign in without a proof. Returns the account and its roles; a refused proof raises
-- (28P01 for a wrong one), with nothing written.
create function threadline.open_console_session (
  p_session text, p_via text, p_account text, p_secret text, p_days integer
) returns table (account text, roles text[])
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
declare
  v_account text;
  v_roles text[];
  v_expires timestamptz;
  v_used timestamptz;
  v_verifier text;
begin
  perform threadline.require_caller(array['console'], 'opening a console session');
  if length(coalesce(p_session, '')) < 32 then
    raise exception 'a session id needs at least 32 characters' using errcode = '22023';
  end if;
  if p_days is null or p_days not between 1 and 30 then
    raise exception 'a session lasts 1 to 30 days, not %', p_days using errcode = '22023';
  end if;
  if p_via = 'token' then
    select l.account, l.roles, l.expires_at, l.used_at into v_account, v_roles, v_expires, v_used
      from threadline.console_links l
     where l.token_hash = threadline.sha256_hex(coalesce(p_secret, ''))
       for update;
    if v_account is null or v_used is not null or v_expires <= now() then
      raise exception 'this sign-in link is unknown, used up or expired'
        using errcode = 'invalid_password';
    end if;
    if p_account is not null and p_account <> v_account then
      raise exception 'this sign-in link signs in %, not %', v_account, p_account
        using errcode = 'invalid_password';
    end if;
    update threadline.console_links l set used_at = now()
     where l.token_hash = threadline.sha256_hex(p_secret);
  elsif p_via = 'password' then
    select p.verifier, p.roles into v_verifier, v_roles
      from threadline.console_passwords p where p.account = p_account;
    -- An unknown name costs a check too, so the time taken tells no name apart.
    if not threadline.password_matches(coalesce(p_secret, ''), coalesce(v_verifier,
         'pbkdf2-sha256$100000$AAAAAAAAAAAAAAAAAAAAAA==$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA='))
       or v_verifier is null then
      raise exception 'invalid user name or password' using errcode = 'invalid_password';
    end if;
    v_account := p_account;
  elsif p_via = 'no-auth' then
    select n.account into v_account from threadline.console_no_auth n;
    if v_account is null then
      raise exception 'sign-in is on: only the install''s owner turns it off (threadline up --no-auth)'
        using errcode = 'insufficient_privilege';
    end if;
    if p_account is not null and p_account <> v_account then
      raise exception 'sign-in is off only for %, not %', v_account, p_account
        using errcode = 'insufficient_privilege';
    end if;
    v_roles := array['approver', 'operator', 'viewer'];
  else
    raise exception 'via: %; a session opens by token, password or no-auth', p_via
      using errcode = '22023';
  end if;
  -- A removed account signs in no more: an admin adds it again.
  if exists (select 1 from threadline.accounts a where a.name = v_account)
     and not exists (select 1 from threadline.accounts a
                      where a.name = v_account and a.removed_at is null) then
    raise exception 'the account % was removed: an admin adds it again (threadline user add %)',
      v_account, v_account using errcode = 'insufficient_privilege';
  end if;
  delete from threadline.console_sessions s where s.expires_at < now() - interval '1 day';
  delete from threadline.console_links l where l.expires_at < now() - interval '1 day';
  -- The account of a name signing in is made on its first use (accounts.ensure).
  if v_account ~ '^[A-Za-z0-9_.@-]{1,100}$' then
    insert into threadline.accounts (name, created_by) values (v_account, 'console sign-in')
    on conflict do nothing;
  end if;
  insert into threadline.console_sessions (session_hash, account, roles, via, expires_at)
  values (threadline.sha256_hex(p_session), v_account, v_roles, p_via,
          now() + make_interval(days => p_days));
  return query select v_account, v_roles;
end;
$$;

revoke all on threadline.console_links, threadline.console_passwords, threadline.console_no_auth
  from public, threadline_conductor, threadline_bots, threadline_console, threadline_hooks,
       threadline_viewer;
revoke all on routine threadline.pbkdf2_sha256 (text, bytea, integer),
  threadline.password_verifier (text, integer), threadline.password_matches (text, text),
  threadline.set_console_password (text, text, text[], text),
  threadline.remove_console_password (text),
  threadline.open_console_session (text, text, text, text, integer) from public;
grant execute on function threadline.open_console_session (text, text, text, text, integer)
  to threadline_console;
