"""Postgres: connections, the embedded server, roles and their grants, migrations and the SQL they
run (Absurd's runtime functions specialised for Threadline's queue, where asked), wake-ups
(through the host's one listener, or handed to a process of the host), worker liveness and the
OpenTelemetry traces a process sends.
"""

__all__ = [
    "current_schema",
    "db",
    "embedded",
    "grants",
    "host_listener",
    "meeting",
    "roles",
    "schema",
    "specialise",
    "traces",
    "wakeups",
    "waking",
    "workers",
]
