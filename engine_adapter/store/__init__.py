"""Postgres: connections, the embedded server, roles and their grants, migrations and the SQL they
run, wake-ups and worker liveness.
"""

__all__ = [
    "current_schema",
    "db",
    "embedded",
    "grants",
    "roles",
    "schema",
    "wakeups",
    "waking",
    "workers",
]
