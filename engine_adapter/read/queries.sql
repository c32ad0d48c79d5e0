-- The named queries of engine_adapter.read: a block is `-- name --`, a comment line, then
-- the query (store/db.py loads every part's queries.sql; a name is unique across them).

-- run_agent_use --
-- A run's agent turns: tokens in and out, and cost where its model was priced.
select coalesce(sum((data -> 'usage' ->> 'in')::bigint), 0)::bigint as "in",
       coalesce(sum((data -> 'usage' ->> 'out')::bigint), 0)::bigint as "out",
       sum((data -> 'usage' ->> 'cost_usd')::float8) as cost_usd,
       count(*)::int as turns
  from threadline.thread_entries
 where run_id = %(run_id)s and kind = 'agent.assistant'

-- runs_page --
-- One keyset page of runs, newest first, filtered. Every filter is optional (null = any).
select run_id, workflow, workflow_version, state, current_step, trigger ->> 'kind' as trigger_kind,
       created_at, updated_at, finished_at
  from threadline.run_threads
 where (%(workflow)s::text is null or workflow = %(workflow)s)
   and (parent_run_id is null or trigger ->> 'what' = 'sub-workflow')  -- branches: in their parent
   and (%(state)s::text is null or state = %(state)s)
   and (%(trigger)s::text is null or trigger ->> 'kind' = %(trigger)s)
   and (%(since)s::timestamptz is null or created_at >= %(since)s)
   and (%(until)s::timestamptz is null or created_at < %(until)s)
   and (%(search)s::text is null
        or threadline.run_search_text(run_id, payload) ilike %(search_any)s)
   and (%(after_at)s::timestamptz is null or (created_at, run_id) < (%(after_at)s, %(after_id)s::uuid))
 order by created_at desc, run_id desc
 limit %(limit)s

-- run_state_counts --
-- How many runs match the filters (state aside), by state.
select state, count(*)::int as runs
  from threadline.run_threads
 where (%(workflow)s::text is null or workflow = %(workflow)s)
   and (parent_run_id is null or trigger ->> 'what' = 'sub-workflow')  -- branches: in their parent
   and (%(trigger)s::text is null or trigger ->> 'kind' = %(trigger)s)
   and (%(since)s::timestamptz is null or created_at >= %(since)s)
   and (%(until)s::timestamptz is null or created_at < %(until)s)
   and (%(search)s::text is null
        or threadline.run_search_text(run_id, payload) ilike %(search_any)s)
 group by state

-- run_state_counts_kept --
-- How many runs there are by state (of one workflow or all), from the kept counts (migration 026).
select state, sum(runs)::int as runs
  from threadline.run_counts
 where (%(workflow)s::text is null or workflow = %(workflow)s)
 group by state

-- runs_over_time_kept --
-- Runs started per UTC day since a day's start, and their state, from the kept counts.
select day as bucket, state, sum(runs)::int as runs
  from threadline.run_counts
 where day >= %(since)s
   and (%(workflow)s::text is null or workflow = %(workflow)s)
 group by 1, 2
having sum(runs) <> 0
 order by 1

-- failures_by_step_kept --
-- Failed runs since a day's start, by workflow and the step they failed at, from the kept counts.
select workflow, coalesce(nullif(step, ''), '(before any step)') as step, sum(runs)::int as runs
  from threadline.run_counts
 where state = 'failed' and day >= %(since)s
   and (%(workflow)s::text is null or workflow = %(workflow)s)
 group by 1, 2
having sum(runs) > 0
 order by 3 desc
 limit 20

-- runs_over_time --
-- Runs started per time bucket and their state, since a moment.
select date_bin(%(bucket)s::interval, created_at, timestamptz '2000-01-01 00:00+00') as bucket,
       state,
       count(*)::int as runs
  from threadline.run_threads
 where created_at >= %(since)s
   and (%(workflow)s::text is null or workflow = %(workflow)s)
   and (parent_run_id is null or trigger ->> 'what' = 'sub-workflow')  -- branches: in their parent
 group by 1, 2
 order by 1

-- step_durations --
-- Finished attempts since a moment with their workflow and duration; bounded.
select r.workflow, split_part(c.step_key, ':', 2) as step, c.outcome,
       extract(epoch from c.finished_at - c.started_at)::float8 as seconds
  from threadline.step_claims c
  join threadline.run_threads r using (run_id)
 where c.started_at >= %(since)s and c.finished_at is not null
   and (%(workflow)s::text is null or r.workflow = %(workflow)s)
 order by c.started_at desc
 limit %(limit)s

-- failures_by_step --
-- Failed runs since a moment, by workflow and the step they failed at.
select workflow, coalesce(current_step, '(before any step)') as step, count(*)::int as runs
  from threadline.run_threads
 where state = 'failed' and created_at >= %(since)s
   and (%(workflow)s::text is null or workflow = %(workflow)s)
   and (parent_run_id is null or trigger ->> 'what' = 'sub-workflow')  -- branches: in their parent
 group by 1, 2
 order by 3 desc
 limit 20

-- agent_use_by_workflow --
-- Model tokens (and cost, where priced) of agent turns since a moment, by workflow.
select r.workflow,
       sum((e.data -> 'usage' ->> 'in')::bigint)::bigint as tokens_in,
       sum((e.data -> 'usage' ->> 'out')::bigint)::bigint as tokens_out,
       sum((e.data -> 'usage' ->> 'cost_usd')::float8) as cost_usd
  from threadline.thread_entries e
  join threadline.run_threads r using (run_id)
 where e.kind = 'agent.assistant' and e.created_at >= %(since)s
   and (%(workflow)s::text is null or r.workflow = %(workflow)s)
 group by 1
 order by 2 desc
 limit 20

-- open_gates --
-- Every run waiting at a human gate, oldest first, with its question and deadline. It waits since
-- its question was asked: the run's updated_at moves with every entry (a reply that decides
-- nothing, a notifier's note).
select r.run_id, r.workflow, r.current_step as step, r.await_key as gate_key,
       coalesce(q.created_at, r.updated_at) as waiting_since,
       q.text as question, q.data ->> 'deadline' as deadline, q.data -> 'approvers' as approvers,
       q.data ->> 'accept' as accept
  from threadline.run_threads r
  left join threadline.thread_entries q
    on q.run_id = r.run_id and q.dedupe_key = 'question:' || r.await_key
 where r.awaiting and r.await_kind = 'gate' and r.state = 'waiting'
 order by waiting_since, r.run_id
 limit %(limit)s

-- thread_page --
-- Entries of a run thread after a seq, long texts cut: the rest is loaded on demand.
select seq, author_kind, author, kind, step_key, left(text, %(cut)s) as text, length(text) as length,
       data, created_at
  from threadline.thread_entries
 where run_id = %(run_id)s and seq > %(after)s
 order by seq
 limit %(limit)s

-- thread_tail --
-- The last entries of a run thread (a long thread opens at its end).
select * from (
  select seq, author_kind, author, kind, step_key, left(text, %(cut)s) as text, length(text) as length,
         data, created_at
    from threadline.thread_entries
   where run_id = %(run_id)s
   order by seq desc
   limit %(limit)s
) tail order by seq

-- entry_text --
-- One entry's whole text.
select text from threadline.thread_entries where run_id = %(run_id)s and seq = %(seq)s

-- last_conductor_beat --
-- The newest heartbeat of any conductor and whether any conductor is alive.
select max(last_beat_at) as last_beat_at,
       exists (select 1 from threadline.live_workers where kind = 'conductor') as alive
  from threadline.workers where kind = 'conductor'

-- open_console_session --
-- A new console session for the account a proof names (migration 049: the database checks the
-- link's token or the password and takes the roles from its own rows); only the id's sha256 is
-- kept. Returns the account and roles signed in.
select account, roles
  from threadline.open_console_session(%(session)s::text, %(via)s::text, %(account)s::text,
                                       %(secret)s::text, %(days)s::integer)

-- mint_console_link --
-- The owner's new one-time sign-in link: only its token's sha256 is kept.
insert into threadline.console_links (token_hash, account, roles, minted_by, expires_at)
values (threadline.sha256_hex(%(token)s), %(account)s, %(roles)s::text[], %(minted_by)s,
        now() + make_interval(secs => %(ttl_s)s))

-- set_console_password --
-- The owner sets an account's console password (its verifier only) and roles.
select threadline.set_console_password(%(account)s::text, %(password)s::text, %(roles)s::text[],
                                       %(set_by)s::text)

-- remove_console_password --
-- The owner removes an account's console password; whether it had one.
select threadline.remove_console_password(%(account)s::text) as removed

-- console_passwords --
-- The accounts that sign in by password, and their roles (the owner's list).
select account, roles, set_by, set_at from threadline.console_passwords order by account

-- allow_console_no_auth --
-- The owner lets the console open sessions without a proof, for this account only.
insert into threadline.console_no_auth (account, set_by) values (%(account)s, %(set_by)s)
on conflict (only_row) do update set account = excluded.account, set_by = excluded.set_by,
                                     set_at = now()

-- end_console_no_auth --
-- The owner turns sign-in back on: no session opens without a proof, and those open end.
with switched_off as (delete from threadline.console_no_auth)
update threadline.console_sessions set closed_at = now()
 where via = 'no-auth' and closed_at is null

-- console_session --
-- The live session an id names: its account, roles and how it signed in.
select account, roles, via from threadline.console_session(%(session)s::text)

-- close_console_session --
-- Sign-out: the session is closed for good; whose it was (null: it was not live).
select threadline.close_console_session(%(session)s::text) as account

-- event_wait --
-- What a waiting step waits for (migration 010).
select names, key from threadline.event_waits where step_key = %(step_key)s

-- run_checkpoints --
-- The run's journal: Threadline's copy of its checkpoints (migration 022), which step results are
-- read back from; it outlives any cleanup of the engine's own tables.
select name as checkpoint_name, state, status, written_at as updated_at
  from threadline.run_journal where run_id = %(run_id)s order by written_at, name

-- run_claims --
-- Every bot attempt of the run.
select step_key, attempt, worker_id, host, started_at, finished_at, outcome, lease_until
  from threadline.step_claims where run_id = %(run_id)s order by started_at

-- run_entries --
-- A page of the run thread in order.
select seq, author_kind, author, kind, step_key, text, data, created_at
  from threadline.thread_entries
 where run_id = %(run_id)s and seq > %(after)s
 order by seq limit %(limit)s

-- step_reports --
-- What a run's bots reported per attempt (each attempt's exit code) and its agents' journals
-- (each tool call's arguments and result): why each step ended as it did. A tool result is cut
-- to its first 4,000 characters here (its full length kept), an entry's data is read no further;
-- a retry note's first line says why its attempt failed.
select step_key, kind, dedupe_key,
       case when kind = 'progress' then split_part(text, E'\n', 1) end as line,
       case when kind = 'agent.tool'
            then jsonb_build_object(
                   'message', jsonb_build_object(
                     'content', left(data -> 'message' ->> 'content', 4000)),
                   'chars', length(data -> 'message' ->> 'content'))
            when kind = 'agent.assistant'
            then jsonb_build_object(
                   'message', jsonb_build_object('tool_calls', data -> 'message' -> 'tool_calls'))
            else jsonb_build_object('attempt', data -> 'attempt', 'exit_code', data -> 'exit_code')
       end as data
  from threadline.thread_entries
 where run_id = %(run_id)s
   and (kind in ('agent.assistant', 'agent.tool')
        or (author_kind = 'bot' and kind in ('progress', 'message') and data ? 'exit_code'))
 order by seq
