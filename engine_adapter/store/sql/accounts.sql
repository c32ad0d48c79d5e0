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

-- run_initiator --
-- Who started a run's tree: the top-level run's trigger caller (a child run's is its root's).
with recursive up as (
  select run_id, parent_run_id, trigger, 0 as depth
    from threadline.run_threads where run_id = %(run_id)s
  union all
  select r.run_id, r.parent_run_id, r.trigger, up.depth + 1
    from threadline.run_threads r join up on r.run_id = up.parent_run_id
   where up.depth < 100
)
select trigger ->> 'caller' as caller from up where parent_run_id is null
