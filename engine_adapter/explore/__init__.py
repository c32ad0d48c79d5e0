"""Explore a live install from Python: `connect()` returns a client whose lists are pandas
DataFrames read from the read schema (migration 046), a SQLAlchemy engine on the same login, and
the people's acts (spawn, reply, approve, deny) through the authorization every door uses; and
the Prometheus metrics the console serves, computed from the same views; and live notebook
widgets (a run, a list of runs, the live processes) redrawn from the change feed.
"""

__all__ = [
    "client",
    "feed",
    "metrics",
    "widgets",
]
