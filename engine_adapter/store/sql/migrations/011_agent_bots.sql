-- Agent bots: a bot backed by an OpenAI-compatible chat-completions endpoint. The API key is
-- never stored, only the name of the environment variable that holds it in the bot process.
create table threadline.bots (
  name text primary key,
  base_url text not null,
  model text not null,
  temperature double precision not null default 0,
  max_tokens integer,
  api_key_env text,
  max_turns integer not null default 20,
  max_tokens_per_run integer,  -- a run's token budget over all its agent steps; null: none
  updated_at timestamptz not null default now()
);

-- The bot's settings as they were when the run was spawned: editing a bot never changes a run
-- in flight (the same rule as the recipe snapshot). Null: the bot has no agent configuration.
alter table threadline.run_threads add column agent jsonb;

grant select on threadline.bots to threadline_conductor, threadline_bots, threadline_hooks,
  threadline_console, threadline_viewer;
grant insert, update, delete on threadline.bots to threadline_console;

-- The agent loop's journal in the thread: each assistant message (with its tool calls) and each
-- tool result, as it completes.
alter table threadline.thread_entries drop constraint thread_entries_kind_check;
alter table threadline.thread_entries add constraint thread_entries_kind_check
  check (kind in ('message', 'instruction', 'question', 'progress', 'signal.dispatch.completed',
                  'signal.dispatch.failed', 'decision', 'note', 'agent.assistant', 'agent.tool'));
