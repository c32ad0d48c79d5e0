"""model.logs: the format asked for is checked before anything changes; a JSON line carries the
record's fields, the context a call names and its traceback; printed text becomes records."""

from __future__ import annotations

import io
import json
import logging

import pytest

from engine_adapter.model import logs
from engine_adapter.model.errors import Invalid


def test_an_unknown_format_is_refused_naming_the_variable_and_value(monkeypatch):
    monkeypatch.setenv(logs.LOG_FORMAT_ENV, "XML")
    root = logging.getLogger()
    handlers = list(root.handlers)
    with pytest.raises(Invalid, match=r"THREADLINE_LOG_FORMAT: 'xml' is not a log format"):
        logs.configure("bots")
    assert root.handlers == handlers  # nothing changed
    assert logs.log_format("JSON") == "json" and logs.log_format("") == "text"
    monkeypatch.delenv(logs.LOG_FORMAT_ENV)
    assert logs.log_format() == "text"


def test_a_json_line_has_the_fields_the_context_and_the_traceback():
    formatter = logs.JsonFormatter("bots")
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.getLogger("threadline.bots").makeRecord(
            "threadline.bots",
            logging.ERROR,
            __file__,
            1,
            "attempt %s of %s failed",
            (2, "k"),
            exc_info=__import__("sys").exc_info(),
            extra={"run_id": "r1", "attempt": 2, "step": "each[1]/x", "unrelated": "no"},
        )
    line = json.loads(formatter.format(record))
    assert line["message"] == "attempt 2 of k failed" and line["level"] == "ERROR"
    assert line["process"] == "bots" and line["logger"] == "threadline.bots"
    assert (line["run_id"], line["attempt"], line["step"]) == ("r1", 2, "each[1]/x")
    assert "unrelated" not in line and "ValueError: boom" in line["exc"]
    assert line["time"].endswith("+00:00")


def test_printed_lines_become_records_one_a_line():
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    logger = logging.getLogger("threadline.test-lines")
    logger.addHandler(Keep())
    logger.propagate = False
    logger.setLevel(logging.INFO)
    out = logs._LinesAsRecords(logger, logging.INFO, io.StringIO())
    print("console: http://127.0.0.1:1/", file=out)
    out.write("two\nthr")
    assert seen == ["console: http://127.0.0.1:1/", "two"]  # a part line waits for its end
    out.write("ee\n\n")
    assert seen[-1] == "three" and len(seen) == 3  # blank lines are not records
