-- Identity: a decision records who made it (an authenticated identity), through which door, and
-- for whom when an operator recorded it on someone else's behalf.
alter table threadline.decisions
  add column via text not null default 'system'
    check (via in ('cli', 'console', 'link', 'api', 'webhook', 'system')),
  add column on_behalf_of text;
