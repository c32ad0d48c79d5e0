-- What a model costs, in US dollars per million tokens in and out: `threadline price set`. A run
-- keeps its bot's model's price in its agent snapshot (editing a price never changes a run in
-- flight); each agent turn's cost is then in its usage, beside its tokens.
create table threadline.model_prices (
  model           text primary key,
  input_per_mtok  numeric not null check (input_per_mtok >= 0),
  output_per_mtok numeric not null check (output_per_mtok >= 0),
  updated_at      timestamptz not null default now()
);

grant select on threadline.model_prices to threadline_conductor, threadline_bots,
  threadline_hooks, threadline_console, threadline_viewer;
grant insert, update, delete on threadline.model_prices to threadline_console;

-- The runs page's chart of agent use reads the agent turns of a window.
create index thread_entries_agent_turns on threadline.thread_entries (created_at)
  where kind = 'agent.assistant';
