"""How `tay status` shows the journal writer: which one, at what priority, or why it stopped."""

from __future__ import annotations

from tay.admin.render import _writer


def test_the_writer_line_names_the_writer_and_its_real_time_priority():
    assert _writer({"running": True, "error": None, "implementation": "c",
                    "rt_priority": 10}) == "running (c writer, real-time priority 10)"
    assert _writer({"running": True, "error": None, "implementation": "python",
                    "rt_priority": 0}) == "running (python writer)"


def test_a_stopped_writer_says_why_and_an_older_engine_still_renders():
    assert _writer({"running": False, "error": "fdatasync failed: EIO",
                    "implementation": "c", "rt_priority": 0}) == "STOPPED: fdatasync failed: EIO"
    assert _writer({"running": True, "error": None}) == "running"  # before 1e3a351
