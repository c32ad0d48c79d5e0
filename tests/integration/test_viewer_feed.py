"""The read-only viewer login follows the console's change feed (migration 050): a notebook's
widgets connected as the viewer hear a change another login makes, on the feed alone, and the
viewer still writes nothing."""

from __future__ import annotations

import threading

import psycopg
import pytest

from engine_adapter import connect
from engine_adapter.testing import harness

RECIPE = """
slug: quiet
steps:
  - id: only
    run_command: echo hi
"""


def test_the_viewer_follows_the_feed_and_still_writes_nothing(conn, apply, db_url, logins):
    apply(RECIPE)
    run = connect(url=db_url, write=True).spawn("quiet")  # no conductor: the run stays put
    tl = connect(url=logins["viewer"])
    heard: set[str] = set()
    lock = threading.Lock()

    def hear(run_ids: frozenset[str]) -> None:
        with lock:
            heard.update(run_ids)

    tl.feed().subscribe(hear)
    # The viewer's listening connection holds the feed's lock: the database now says the feed.
    harness.wait_for(
        lambda: conn.execute("select threadline.feed_followed() as f").fetchone()["f"],
        timeout=15,
        what="the viewer to follow the change feed",
    )

    def touched() -> bool:
        # Another login changes the run's row: only the change feed says so (no conductor's
        # wake-up), so only a feed the viewer follows brings the run's id.
        conn.execute("update threadline.run_threads set state = state where run_id = %s", (run,))
        with lock:
            return run in heard

    harness.wait_for(touched, timeout=15, interval=0.3, what="the viewer's feed to hear the run")
    tl.close()

    with psycopg.connect(logins["viewer"], autocommit=True) as viewer:
        for sql, args in (
            ("update threadline.run_threads set state = state where run_id = %s", (run,)),
            ("delete from threadline.thread_entries where run_id = %s", (run,)),
            (
                "select threadline.append_entry(%s, 'human', 'x', 'message', null, null, 'hi',"
                " '{}'::jsonb)",
                (run,),
            ),
            ("select threadline.send_wakes(array['threadline_changes'], array['x'])", None),
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                viewer.execute(sql, args)
