-- Threadline's own tables. Absurd keeps its tables in schema "absurd"; we never edit them.

create table threadline.workflows (
  slug        text primary key,
  name        text not null,
  description text,
  bot         text not null,
  recipe      jsonb not null,
  schedule    text,
  timezone    text not null default 'UTC',
  enabled     boolean not null default true,
  version     integer not null,
  hash        text not null,
  created_at  timestamptz not null default now(),
  updated_at  timestamptz not null default now()
);

create table threadline.workflow_versions (
  slug       text not null references threadline.workflows (slug),
  version    integer not null,
  hash       text not null,
  recipe     jsonb not null,
  source     text not null check (source in ('create', 'update', 'proposal', 'rollback')),
  created_at timestamptz not null default now(),
  primary key (slug, version)
);

-- One row per run: the bridge between an Absurd task and its thread. run_id = Absurd task id.
create table threadline.run_threads (
  run_id           uuid primary key,
  workflow         text not null references threadline.workflows (slug),
  workflow_version integer not null,
  recipe_hash      text not null,
  recipe           jsonb not null,
  payload          jsonb not null,
  bot              text not null,
  trigger          jsonb not null,
  idempotency_key  text unique,
  state            text not null default 'pending'
                   check (state in ('pending', 'queued', 'running', 'sleeping', 'waiting',
                                    'completed', 'failed', 'cancelled')),
  current_step     text,
  current_try      integer,
  await_key        text,
  await_kind       text check (await_kind in ('bot', 'gate')),
  awaiting         boolean not null default false,
  last_emitted_key text,
  next_seq         integer not null default 1,
  wake_at          timestamptz,
  created_at       timestamptz not null default now(),
  updated_at       timestamptz not null default now(),
  finished_at      timestamptz
);
create index run_threads_workflow_created on threadline.run_threads (workflow, created_at desc);
create index run_threads_state_created on threadline.run_threads (state, created_at desc);
create index run_threads_created on threadline.run_threads (created_at desc, run_id);
create index run_threads_awaiting on threadline.run_threads (await_kind, updated_at) where awaiting;

-- The run thread: append-only, ordered by a per-run seq assigned under the run row lock.
create table threadline.thread_entries (
  run_id      uuid not null references threadline.run_threads (run_id),
  seq         integer not null,
  author_kind text not null check (author_kind in ('system', 'bot', 'human')),
  author      text not null,
  kind        text not null check (kind in ('message', 'instruction', 'question', 'progress',
                                            'signal.dispatch.completed', 'signal.dispatch.failed',
                                            'decision', 'note')),
  step_key    text,
  dedupe_key  text,
  text        text not null,
  data        jsonb,
  created_at  timestamptz not null default now(),
  primary key (run_id, seq)
);
create unique index thread_entries_dedupe on threadline.thread_entries (run_id, dedupe_key)
  where dedupe_key is not null;
create index thread_entries_step_key on threadline.thread_entries (step_key, kind)
  where step_key is not null;

-- A bot's claim of one instruction; the attempt number is the fencing token.
create table threadline.step_claims (
  step_key    text not null,
  attempt     integer not null,
  run_id      uuid not null references threadline.run_threads (run_id),
  worker_id   text not null,
  host        text not null,
  pgid        integer,
  lease_until timestamptz not null,
  started_at  timestamptz not null default now(),
  finished_at timestamptz,
  outcome     text check (outcome in ('completed', 'failed', 'lost', 'cancelled')),
  retry_at    timestamptz,
  primary key (step_key, attempt)
);
create index step_claims_run on threadline.step_claims (run_id);
create index step_claims_open on threadline.step_claims (worker_id) where finished_at is null;

create table threadline.decisions (
  step_key   text not null,
  run_id     uuid not null references threadline.run_threads (run_id),
  decision   text not null check (decision in ('approve', 'deny', 'timeout', 'reply')),
  actor      text not null,
  reason     text,
  created_at timestamptz not null default now(),
  primary key (step_key)
);

create sequence threadline.worker_lock_keys;

-- Conductor and bot processes. Alive while their advisory lock (classid 7411, objid lock_key) is held.
create table threadline.workers (
  id           text primary key,
  kind         text not null check (kind in ('conductor', 'bots')),
  host         text not null,
  pid          integer not null,
  lock_key     integer not null unique,
  started_at   timestamptz not null default now(),
  last_beat_at timestamptz not null default now(),
  version      text not null
);

create table threadline.schedule_ticks (
  workflow text not null references threadline.workflows (slug),
  slot     timestamptz not null,
  run_id   uuid,
  primary key (workflow, slot)
);

-- Append one entry to a run thread under the run's row lock, so seq order is commit order.
-- A repeated dedupe_key appends nothing and returns null: SEND may be replayed after a crash.
-- A bot entry must come from the thread's one bound bot.
create function threadline.append_entry (
  p_run_id uuid, p_author_kind text, p_author text, p_kind text,
  p_step_key text, p_dedupe_key text, p_text text, p_data jsonb
)
  returns integer
  language plpgsql
as $$
declare
  v_seq integer;
  v_bot text;
begin
  select next_seq, bot into v_seq, v_bot
    from threadline.run_threads where run_id = p_run_id for update;
  if v_seq is null then
    raise exception 'run % not found', p_run_id using errcode = 'P0002';
  end if;
  if p_author_kind = 'bot' and p_author <> v_bot then
    raise exception 'bot "%" may not write to run %: its thread is bound to bot "%"',
      p_author, p_run_id, v_bot using errcode = 'P0001';
  end if;
  if p_dedupe_key is not null and exists (
    select 1 from threadline.thread_entries where run_id = p_run_id and dedupe_key = p_dedupe_key
  ) then
    return null;
  end if;
  insert into threadline.thread_entries
    (run_id, seq, author_kind, author, kind, step_key, dedupe_key, text, data)
  values (p_run_id, v_seq, p_author_kind, p_author, p_kind, p_step_key, p_dedupe_key, p_text, p_data);
  update threadline.run_threads set next_seq = v_seq + 1, updated_at = now() where run_id = p_run_id;
  return v_seq;
end;
$$;

-- A worker is alive while its advisory lock is held: a SIGKILLed process shows as dead at once.
create view threadline.live_workers as
select w.*
  from threadline.workers w
 where exists (
   select 1 from pg_locks l
    where l.locktype = 'advisory' and l.granted
      and l.database = (select oid from pg_database where datname = current_database())
      and l.classid = 7411::oid and l.objid = w.lock_key::oid and l.objsubid = 2
 );

-- Whether a bot may claim a step key now: no live claim, no pending retry, no completed attempt.
create function threadline.step_key_free (p_step_key text)
  returns boolean
  language sql
  stable
as $$
  select not exists (
    select 1 from threadline.step_claims c
     where c.step_key = p_step_key
       and ((c.finished_at is null and c.lease_until > now()
             and exists (select 1 from threadline.live_workers l where l.id = c.worker_id))
            or c.outcome = 'completed'
            or c.retry_at > now()))
$$;
