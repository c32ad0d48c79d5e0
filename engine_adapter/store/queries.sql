-- The named queries of engine_adapter.store: a block is `-- name --`, a comment line, then
-- the query (store/db.py loads every part's queries.sql; a name is unique across them).

-- What each process role (and PUBLIC) may do in schemas threadline, threadline_read and absurd, as the server
-- answers it (membership included): compared with the allowlist in sql/grants.txt (grants.py).

-- workflow_version --
-- One stored version of a workflow's recipe, with the text it was written as (null: none kept).
select slug, version, hash, source, recipe, rolled_back_from, created_at, source_text
  from threadline.workflow_versions where slug = %(slug)s and version = %(version)s

-- role_privileges --
-- One row per (role, kind, object, privilege) held: schemas, tables and views, the columns of a
-- table the role holds only per column, sequences, and routines (an extension's own excepted).
with who (role) as (
  select unnest(%(roles)s::text[])
), rels as (
  select c.oid, c.relkind, format('%%I.%%I', n.nspname, c.relname) as name
    from pg_class c join pg_namespace n on n.oid = c.relnamespace
   where n.nspname in ('threadline', 'threadline_read', 'absurd') and c.relkind in ('r', 'p', 'v', 'm', 'f', 'S')
), table_privs (priv) as (
  select unnest(array['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER']
                || case when current_setting('server_version_num')::int >= 170000
                        then array['MAINTAIN'] else array[]::text[] end)
), column_privs (priv) as (
  values ('SELECT'), ('INSERT'), ('UPDATE'), ('REFERENCES')
), routines as (
  select p.oid, format('%%I.%%I(%%s)', n.nspname, p.proname, oidvectortypes(p.proargtypes)) as name
    from pg_proc p join pg_namespace n on n.oid = p.pronamespace
   where n.nspname in ('threadline', 'threadline_read', 'absurd')
     and not exists (select 1 from pg_depend d
                      where d.classid = 'pg_proc'::regclass and d.objid = p.oid
                        and d.deptype = 'e')
)
select w.role, 'schema' as kind, s.nspname::text as object, x.priv as privilege
  from who w, pg_namespace s, (values ('USAGE'), ('CREATE')) x (priv)
 where s.nspname in ('threadline', 'threadline_read', 'absurd') and has_schema_privilege(w.role, s.oid, x.priv)
union all
select w.role, 'table', r.name, t.priv
  from who w, rels r, table_privs t
 where r.relkind <> 'S' and has_table_privilege(w.role, r.oid, t.priv)
union all
select w.role, 'column', format('%%s(%%I)', r.name, a.attname), c.priv
  from who w, rels r, pg_attribute a, column_privs c
 where r.relkind <> 'S' and a.attrelid = r.oid and a.attnum > 0 and not a.attisdropped
   and has_column_privilege(w.role, r.oid, a.attnum, c.priv)
   and not has_table_privilege(w.role, r.oid, c.priv)
union all
select w.role, 'sequence', r.name, x.priv
  from who w, rels r, (values ('USAGE'), ('SELECT'), ('UPDATE')) x (priv)
 where r.relkind = 'S' and has_sequence_privilege(w.role, r.oid, x.priv)
union all
select w.role, 'routine', f.name, 'EXECUTE'
  from who w, routines f
 where has_function_privilege(w.role, f.oid, 'EXECUTE')

-- get_run --
-- The run row without a lock.
select * from threadline.run_threads where run_id = %(run_id)s

-- register_worker --
-- A new conductor or bot process, of the caller's kind; takes on this connection the advisory
-- lock its lock key names, held while the process lives (migration 043).
select threadline.register_worker(%(id)s, %(kind)s, %(host)s, %(pid)s, %(version)s,
                                  %(sandbox)s) as lock_key

-- heartbeat_worker --
-- The process is still beating (only the connection holding its lock may say so).
select threadline.beat_worker(%(id)s, false)

-- stop_worker --
-- A process stopping cleanly: health reads it as stopped, not dead (migration 040).
select threadline.beat_worker(%(id)s, true)

-- list_workers --
-- Every known process, newest first, with liveness from its advisory lock.
select w.id, w.kind, w.host, w.pid, w.started_at, w.last_beat_at, w.version, w.sandbox,
       w.stopped_at, extract(epoch from (now() - w.last_beat_at))::float8 as last_beat_age_s,
       exists (select 1 from threadline.live_workers l where l.id = w.id) as alive
  from threadline.workers w
 order by w.started_at desc
 limit 200
