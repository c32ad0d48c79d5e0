-- The runs page's search (a fragment of a run id, or any text of the payload) read every run: at
-- 1,000,000 runs, 561 ms for a rare term. A trigram index answers it from the matching runs.
-- pg_trgm ships with PostgreSQL and is a trusted extension (13+: a database owner may create
-- it); where it cannot be created the search still works, by a scan, and says nothing.
do $$
begin
  create extension if not exists pg_trgm;
exception when others then
  raise notice 'pg_trgm is not available (%): the runs page searches by a scan', sqlerrm;
end;
$$;

-- What a search looks in: the run id and the payload, as text.
create function threadline.run_search_text (p_run_id uuid, p_payload jsonb)
  returns text
  language sql
  immutable
as $$
  select p_run_id::text || ' ' || p_payload::text
$$;

do $$
begin
  if exists (select 1 from pg_extension where extname = 'pg_trgm') then
    execute $sql$
      create index run_threads_search on threadline.run_threads
       using gin (threadline.run_search_text(run_id, payload) gin_trgm_ops)
    $sql$;
  end if;
end;
$$;
