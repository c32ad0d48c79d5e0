-- A decision by resume link, and its audit, name no account but the token's subject's (migration
-- 033's accounts; none where it has none): the ingress, which records them only as that subject
-- (migration 032), may not give them another account, nor say a token was minted for them.
create function threadline.link_account_is_the_subjects () returns trigger
  language plpgsql
  security definer
  set search_path = pg_catalog, pg_temp
as $$
begin
  if threadline.caller_kind() = 'hooks'
     and (new.minted_by is not null
          or (new.account_id is not null
              and new.account_id is distinct from (select a.id from threadline.accounts a
                                                    where a.name = new.actor
                                                      and a.removed_at is null))) then
    perform threadline.refuse(format('recording a decision by link for another account than %s''s',
                                     new.actor));
  end if;
  return new;
end;
$$;
revoke all on function threadline.link_account_is_the_subjects () from public;

create trigger decisions_link_account before insert on threadline.decisions
  for each row execute function threadline.link_account_is_the_subjects();
create trigger decision_audit_link_account before insert on threadline.decision_audit
  for each row execute function threadline.link_account_is_the_subjects();
