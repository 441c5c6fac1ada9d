"""`tay compact` reports the outcome of a compaction that outlives a request deadline.

The engine answers ``request_timeout`` after its request deadline (30 s by default) while an
online compaction carries on; the client's own socket timeout may also come first. Either
way the command follows ``status`` until the compaction has ended and prints what the reply
would have said, or the failure. The engine side of this is in tests/server/test_admin_e2e.py;
here a scripted admin client stands in for the engine to drive each ordering.
"""

from __future__ import annotations

import argparse
import json

import pytest

from tay.admin import cli as admin_cli
from tay.admin.client import AdminRefused, AdminTimeout

REPORT = {"epoch_id": "e2", "source_epoch_id": "e1", "retained_jobs": 7, "expired_jobs": 3,
          "bytes_before": 900, "bytes_after": 300, "duration_ms": 45_000, "pause_ms": 3.4,
          "trigger": "admin"}
FAILURE = {"at": 1_700_000_000_000, "error": "ENOSPC while writing the candidate"}


def storage(running: bool, last=None, failure=None) -> dict:
    return {"storage": {"last_compaction": last,
                        "compaction": {"running": running, "last_failure": failure}}}


class ScriptedAdmin:
    """Answers each call with the next scripted reply (raising it if it is an exception)."""

    def __init__(self, script: list) -> None:
        self.script = list(script)
        self.calls: list[str] = []

    def call(self, op: str, body: dict) -> dict:
        self.calls.append(op)
        reply = self.script.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply


def run(client: ScriptedAdmin, *, as_json: bool = False) -> int:
    args = argparse.Namespace(terminal_retention=None, json=as_json)
    return admin_cli._compact(client, args)


TIMED_OUT = AdminRefused("request_timeout", "no answer within 30000 ms", {})


@pytest.mark.parametrize("late", [TIMED_OUT, AdminTimeout("no answer within 30 s")],
                         ids=["engine-deadline", "client-timeout"])
def test_a_long_compaction_is_followed_to_its_report(late, capsys, monkeypatch):
    monkeypatch.setattr(admin_cli, "COMPACTION_POLL_S", 0)
    client = ScriptedAdmin([storage(False), late, storage(True), storage(True),
                            storage(False, last=REPORT)])
    assert run(client, as_json=True) == 0
    assert client.calls == ["status", "compact", "status", "status", "status"]
    out = capsys.readouterr()
    assert json.loads(out.out) == REPORT
    assert "still compacting" in out.err


def test_an_earlier_report_is_not_taken_for_this_compactions(monkeypatch):
    monkeypatch.setattr(admin_cli, "COMPACTION_POLL_S", 0)
    earlier = {**REPORT, "epoch_id": "e1", "trigger": "automatic"}
    client = ScriptedAdmin([storage(False, last=earlier), TIMED_OUT,
                            storage(False, last=earlier, failure=FAILURE)])
    with pytest.raises(AdminRefused) as refused:
        run(client)
    assert refused.value.code == "compaction_failed"
    assert "ENOSPC" in str(refused.value)


def test_no_outcome_at_all_stays_a_timeout(monkeypatch):
    monkeypatch.setattr(admin_cli, "COMPACTION_POLL_S", 0)
    client = ScriptedAdmin([storage(False), TIMED_OUT, storage(False)])
    with pytest.raises(AdminRefused) as refused:
        run(client)
    assert refused.value.code == "request_timeout"


def test_other_refusals_are_not_waited_on():
    client = ScriptedAdmin([storage(False),
                            AdminRefused("compaction_unavailable", "a v1 store", {})])
    with pytest.raises(AdminRefused) as refused:
        run(client)
    assert refused.value.code == "compaction_unavailable" and client.calls == ["status", "compact"]


def test_the_readable_report_names_the_new_epoch(capsys, monkeypatch):
    monkeypatch.setattr(admin_cli, "COMPACTION_POLL_S", 0)
    assert run(ScriptedAdmin([storage(False), TIMED_OUT, storage(False, last=REPORT)])) == 0
    assert capsys.readouterr().out.startswith("compacted: epoch e2, 7 jobs kept, 3 expired")
