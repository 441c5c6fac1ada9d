"""``--log-format text|json`` for ``tay serve`` (docs/operations.md "Logs").

JSON lines carry ``ts`` (UTC, ISO 8601 with milliseconds), ``level``, ``logger``,
``message``, and the structured fields a record was logged with (job_id, task, queue,
outcome, error_type); an exception adds ``exc``. Nothing secret is logged: no args, no
results, no error messages or tracebacks (those are in the admin API), no tokens.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys

FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
STRUCTURED_FIELDS = ("job_id", "task", "queue", "outcome", "error_type")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": dt.datetime.fromtimestamp(record.created, dt.timezone.utc)
                    .isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in STRUCTURED_FIELDS:
            if name in record.__dict__:
                entry[name] = record.__dict__[name]
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(level: str, log_format: str) -> None:
    """Log to stderr at ``level`` in ``log_format`` (replaces any earlier handlers)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
