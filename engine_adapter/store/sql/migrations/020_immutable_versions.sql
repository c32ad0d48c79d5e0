-- A workflow's versions are history: never changed, never removed, by anyone (the owner and a
-- superuser included: a trigger, not a grant). A rollback is a new version that records the one
-- it restores.
alter table threadline.workflow_versions add column rolled_back_from integer;

create function threadline.versions_are_immutable () returns trigger
  language plpgsql
as $$
begin
  if tg_level = 'STATEMENT' then
    raise exception 'workflow versions are immutable: truncate refused'
      using errcode = 'insufficient_privilege';
  end if;
  raise exception 'workflow versions are immutable: % of version % of workflow % refused',
    lower(tg_op), old.version, old.slug
    using errcode = 'insufficient_privilege',
          hint = 'a change is a new version: threadline recipe apply, or recipe rollback';
end;
$$;

create trigger workflow_versions_immutable before update or delete on threadline.workflow_versions
  for each row execute function threadline.versions_are_immutable();
create trigger workflow_versions_not_truncated before truncate on threadline.workflow_versions
  for each statement execute function threadline.versions_are_immutable();

revoke update on threadline.workflow_versions from threadline_console;
create index workflow_versions_hash on threadline.workflow_versions (slug, hash);
