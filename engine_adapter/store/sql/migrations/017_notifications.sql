-- The notification outbox: a row per (event, rule, target), written in the same transaction as
-- the event (a gate's question, a run's failure) or by the waiting sweep, delivered by the
-- conductor's notifier with retries and backoff, and idempotent per event: the unique key makes
-- a replayed event write nothing twice, and a receiver sees one id per notification.
create table threadline.notifications (
  id          bigserial primary key,
  run_id      uuid not null references threadline.run_threads (run_id),
  event       text not null check (event in ('gate', 'failed', 'waiting')),
  event_key   text not null,      -- the gate's step key, or the failed step's
  rule        integer not null,   -- its index in the run's recipe `notify` list
  channel     text not null check (channel in ('webhook', 'email')),
  target      text not null,      -- a URL (or env:THREADLINE_NAME), or an address
  subject     text not null,      -- whom its resume links decide as
  text        text not null,      -- what happened, in words
  status      text not null default 'pending' check (status in ('pending', 'sent', 'failed')),
  attempts    integer not null default 0,
  next_at     timestamptz not null default now(),
  last_error  text,
  created_at  timestamptz not null default now(),
  sent_at     timestamptz,
  unique (event, event_key, rule, target)
);
create index notifications_due on threadline.notifications (next_at) where status = 'pending';

grant select, insert, update on threadline.notifications to threadline_conductor;
grant usage on sequence threadline.notifications_id_seq to threadline_conductor;
grant select on threadline.notifications to threadline_console, threadline_viewer;
-- The notifier hands out resume links: it issues their tokens (kept as hashes).
grant select, insert on threadline.resume_tokens to threadline_conductor;
