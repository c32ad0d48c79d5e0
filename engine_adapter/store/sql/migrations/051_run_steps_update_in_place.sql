-- A run's row is updated twice a step: the SEND arms it (awaiting, its step and key) and the
-- done event disarms it (awaiting cleared). With `awaiting` in an index's predicate neither
-- update could be HOT: each wrote a new entry into every index of run_threads (nine, the
-- trigram index's pending list among them), about 80 of a three-step run's ~450 WAL records.
-- The index now names the states a run awaits in (a bot: running; a person or an event:
-- waiting), which a step's updates leave as they are, so they usually stay on their page and
-- touch no index; the queries that look for awaiting runs say the state as well.
drop index threadline.run_threads_awaiting;
create index run_threads_awaits on threadline.run_threads (await_kind)
  where state in ('running', 'waiting');
