-- The global pause switch: while its one row exists, no new run starts (a manual spawn, a
-- schedule slot, an event, a webhook, a rerun are refused, saying so); runs in flight go on,
-- their child runs included.
create table threadline.pause (
  only_row   boolean primary key default true check (only_row),
  reason     text,
  paused_by  text not null,
  via        text not null,
  paused_at  timestamptz not null default now()
);

grant select on threadline.pause to threadline_conductor, threadline_bots, threadline_hooks,
  threadline_console, threadline_viewer;
grant insert, delete on threadline.pause to threadline_console;
