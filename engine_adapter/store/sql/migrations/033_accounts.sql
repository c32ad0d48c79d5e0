-- Accounts: who a person or a program is, by id, not by a name anyone may type. Console users,
-- the OS accounts that run the CLI and API tokens each map to one; a gate's `approvers` (and an
-- any_reply gate's `from`, a notify rule's `to`) name accounts. Removing an account keeps its
-- row (decisions and audits still point at it); the same name added again is a new account, so
-- nothing issued to the old one (a token, a link) speaks for the new one.
create table threadline.accounts (
  id          bigint generated always as identity primary key,
  name        text not null check (name ~ '^[A-Za-z0-9_.@-]{1,100}$'),
  created_by  text not null,
  created_at  timestamptz not null default now(),
  removed_by  text,
  removed_at  timestamptz
);
create unique index accounts_live_name on threadline.accounts (name) where removed_at is null;
create index accounts_name on threadline.accounts (name, id);

-- Where an account hears of things: a resume link of its own goes only to a channel registered
-- here, by the account itself or an admin, never to one a recipe names.
create table threadline.account_channels (
  account_id  bigint not null references threadline.accounts (id),
  channel     text not null check (channel in ('email', 'webhook')),
  target      text not null check (length(target) between 1 and 2000),
  added_by    text not null,
  added_at    timestamptz not null default now(),
  primary key (account_id, channel, target)
);

-- An API token acts as an account (account_id); minted_by is the account that minted it. A
-- token minted for another account (by an admin) is shown as delegated wherever it acts.
alter table threadline.api_tokens
  add column account_id bigint references threadline.accounts (id),
  add column minted_by bigint references threadline.accounts (id);
-- A token's name labels it (list, revoke); a revoked token's name may be used again.
alter table threadline.api_tokens drop constraint api_tokens_name_key;
create unique index api_tokens_live_name on threadline.api_tokens (name) where revoked_at is null;

-- Tokens made before accounts: each name becomes an account, and each token acts for it as
-- minted by its creator (so one minted by root for "alice" shows as delegated from now on).
insert into threadline.accounts (name, created_by)
select distinct n, 'migration 033'
  from (select name as n from threadline.api_tokens
        union select created_by from threadline.api_tokens) names
 where n ~ '^[A-Za-z0-9_.@-]{1,100}$';
update threadline.api_tokens t
   set account_id = (select id from threadline.accounts a where a.name = t.name),
       minted_by = (select id from threadline.accounts a where a.name = t.created_by);
update threadline.api_tokens set revoked_at = now() where account_id is null and revoked_at is null;

-- Decisions and their audit keep the deciding account and, for a delegated token, who minted it.
alter table threadline.decisions
  add column account_id bigint,
  add column minted_by text;
alter table threadline.decision_audit
  add column account_id bigint,
  add column minted_by text;

-- A notification for no account (a plain webhook or address) carries no resume link: it has no
-- subject. One for an account (`to:`) has that account as its subject.
alter table threadline.notifications alter column subject drop not null;

-- The console role is the door for people (the CLI uses it too): it keeps accounts and channels.
grant select, insert, update (removed_by, removed_at) on threadline.accounts to threadline_console;
grant select, insert, delete on threadline.account_channels to threadline_console;
-- The notifier finds an account's channels; the ingress and the viewer see who an account is.
grant select on threadline.accounts, threadline.account_channels to threadline_conductor;
grant select on threadline.accounts to threadline_hooks, threadline_viewer;
