-- The change feed reads a changed row only while a console follows it.
--
-- announce_change (migration 004, its pg_notify made a wake by 030) turned the whole changed row
-- into jsonb to find its run id before asking whether anyone follows the feed. A run's row holds
-- its recipe, payload and trigger, and a step updates it three or four times, so with no console
-- open every step still copied (and, for a large recipe, detoasted) its run's whole recipe a few
-- times over, only for wake to drop the result. Now the trigger asks first.
create or replace function threadline.announce_change () returns trigger
  language plpgsql
as $$
begin
  if not threadline.feed_followed() then
    return null;
  end if;
  perform threadline.wake('threadline_changes',
                          tg_table_name || ':' ||
                          coalesce(to_jsonb(coalesce(new, old)) ->> 'run_id', ''));
  return null;
end;
$$;
