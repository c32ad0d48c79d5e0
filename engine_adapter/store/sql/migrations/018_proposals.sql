-- Proposals: a change to a workflow that opted in (`allow_proposals: true`) is proposed, not made.
-- A proposal keeps its base hash, the proposed recipe, a summary, the diff and a risk level; a
-- person reviews it; applying it re-checks opt-in, approval, expiry and that the base is still
-- the workflow's current version (else it is stale), and adds a version whose source is
-- 'proposal'.
create table threadline.proposals (
  id             bigserial primary key,
  workflow       text not null references threadline.workflows (slug),
  base_hash      text not null,
  proposed       jsonb not null,
  proposed_hash  text not null,
  summary        text not null,
  diff           text not null,
  risk           text not null check (risk in ('low', 'medium', 'high')),
  risk_reasons   text[] not null default '{}',
  status         text not null default 'open'
                 check (status in ('open', 'approved', 'rejected', 'applied', 'stale', 'expired')),
  proposed_by    text not null,
  proposed_via   text not null,
  run_id         uuid,          -- an agent's proposal: the run whose step proposed it
  created_at     timestamptz not null default now(),
  expires_at     timestamptz not null default now() + interval '14 days',
  reviewed_by    text,
  review_note    text,
  reviewed_at    timestamptz,
  applied_version integer,
  applied_at     timestamptz
);
create index proposals_workflow on threadline.proposals (workflow, created_at desc);

grant select, insert, update on threadline.proposals to threadline_console;
grant usage on sequence threadline.proposals_id_seq to threadline_console;
grant select, insert on threadline.proposals to threadline_conductor;  -- an agent's propose tool
grant usage on sequence threadline.proposals_id_seq to threadline_conductor;
grant select on threadline.proposals to threadline_viewer;
