"""How a Threadline process logs: a line of text (the default) or, with THREADLINE_LOG_FORMAT=json
(or `--log-format json` on a process command), one JSON object per line, for a log shipper.

A JSON line holds time (UTC, ISO 8601), level, logger, message, process (up, conductor, bots,
hooks, console), pid, the run_id, step, step_key and attempt a log call names (`extra=`), and
exc (the traceback) where there is one. In JSON mode nothing else reaches the process's output
as bare text: a line printed to stdout (an address, a sign-in link) or to stderr is logged as a
record of its own (INFO and ERROR), and an uncaught exception, in any thread, is one record.
"""

from __future__ import annotations

import io
import json
import logging
import os
import sys
import threading
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

from engine_adapter.model.errors import Invalid

LOG_FORMAT_ENV = "THREADLINE_LOG_FORMAT"
FORMATS = ("text", "json")
# What a log call may name with extra=: copied into its JSON line when it does.
CONTEXT = ("run_id", "workflow", "step", "step_key", "attempt", "worker_id")
# Libraries whose INFO lines are per request or per browser session: warnings only.
QUIET = ("bokeh", "tornado.access")
_json = False  # configure chose JSON lines for this process


def log_format(asked: str | None = None) -> str:
    """The format asked for (a flag), else $THREADLINE_LOG_FORMAT, else text."""
    value = asked if asked is not None else os.environ.get(LOG_FORMAT_ENV, "")
    value = value.strip().lower() or "text"
    if value not in FORMATS:
        raise Invalid(f"{LOG_FORMAT_ENV}: {value!r} is not a log format (text or json)")
    return value


class JsonFormatter(logging.Formatter):
    def __init__(self, process: str) -> None:
        super().__init__()
        self.process = process

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "process": self.process,
            "pid": record.process,
        }
        for key in CONTEXT:
            value = record.__dict__.get(key)
            if value is not None:
                line[key] = value if isinstance(value, int | float) else str(value)
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack"] = record.stack_info
        return json.dumps(line, ensure_ascii=False, default=str)


class _LinesAsRecords(io.TextIOBase):
    """A stand-in for sys.stdout or sys.stderr: each whole line written is a log record. A line
    written while that record is being handled (logging's own error report) goes out raw."""

    def __init__(self, logger: logging.Logger, level: int, raw: Any) -> None:
        self.logger, self.level, self.raw = logger, level, raw
        self.pending = ""
        self.busy = threading.local()

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if getattr(self.busy, "on", False):
            self.raw.write(text)
            return len(text)
        self.pending += text
        *lines, self.pending = self.pending.split("\n")
        self.busy.on = True
        try:
            for line in lines:
                if line.strip():
                    self.logger.log(self.level, line.rstrip())
        finally:
            self.busy.on = False
        return len(text)

    def flush(self) -> None:
        self.raw.flush()

    def fileno(self) -> int:  # a child process handed this stream gets the real descriptor
        return int(self.raw.fileno())

    def isatty(self) -> bool:
        return False

    @property
    def encoding(self) -> str:  # type: ignore[override]  # what callers that ask expect
        return str(getattr(self.raw, "encoding", None) or "utf-8")


def configure(process: str, asked: str | None = None) -> str:
    """Set up this process's logging, before anything logs; returns the format chosen. Invalid
    (naming the variable and its value) for an unknown format, with nothing changed."""
    chosen = log_format(asked)
    raw_err = sys.stderr
    handler = logging.StreamHandler(raw_err)
    if chosen == "json":
        handler.setFormatter(JsonFormatter(process))
    else:
        handler.setFormatter(logging.Formatter(f"%(asctime)s {process} %(levelname)s %(message)s"))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    for name in QUIET:
        logging.getLogger(name).setLevel(logging.WARNING)
    logging.captureWarnings(True)
    global _json
    _json = chosen == "json"
    if _json:
        os.environ[LOG_FORMAT_ENV] = "json"  # the processes `up` starts log alike
        sys.stdout = _LinesAsRecords(
            logging.getLogger(f"threadline.{process}"), logging.INFO, sys.stdout
        )
        sys.stderr = _LinesAsRecords(
            logging.getLogger(f"threadline.{process}"), logging.ERROR, raw_err
        )
        _log_uncaught(logging.getLogger(f"threadline.{process}"))
    return chosen


def in_json() -> bool:
    """Whether this process logs JSON lines (configure chose them)."""
    return _json


def _log_uncaught(log: logging.Logger) -> None:
    def main_thread(
        kind: type[BaseException], err: BaseException, tb: TracebackType | None
    ) -> None:
        log.critical("uncaught %s: %s", kind.__name__, err, exc_info=(kind, err, tb))

    def other_thread(args: threading.ExceptHookArgs) -> None:
        if args.exc_type is SystemExit or args.exc_value is None:
            return
        name = args.thread.name if args.thread else "?"
        log.error(
            "uncaught %s in thread %s: %s",
            args.exc_type.__name__,
            name,
            args.exc_value,
            exc_info=(args.exc_type, args.exc_value, args.exc_traceback),
        )

    sys.excepthook = main_thread
    threading.excepthook = other_thread
