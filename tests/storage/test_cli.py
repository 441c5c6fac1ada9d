"""``tay storage`` through a real subprocess: output and exit codes (0 ok, 1 refused, 2 usage)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.storage.conftest import EVENT_DIR, RECORD_DIR, SEGMENT_DIR, event_fixture
from tay.storage.journal.writer import init_store
from tay.storage.formats.record import decode_record
from tay.storage.recovery.recover import recover

REPO = Path(__file__).resolve().parents[2]


def tay(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tay.cli", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=60)


def test_init_then_inspect_json(data_dir):
    done = tay("storage", "init", "--data-dir", str(data_dir), "--durability", "sync",
               "--validated-filesystem")
    assert done.returncode == 0, done.stderr
    frames = [decode_record(event_fixture(n)) for n in ("E1", "E2", "E3", "E4", "E6", "E5")]
    journal = recover(str(data_dir), durability="write").journal
    journal.append_batch([(f.sequence, f.type, f.schema, f.payload) for f in frames])
    journal.close()
    done = tay("storage", "inspect", "--data-dir", str(data_dir), "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["ok"] is True
    assert (summary["segments"], summary["records"], summary["next_sequence"]) == (1, 6, 7)
    assert summary["jobs"] == 1 and sum(summary["job_states"].values()) == 1
    text = tay("storage", "inspect", "--data-dir", str(data_dir))
    assert text.returncode == 0 and "next sequence   7" in text.stdout


def test_init_refuses_sync_without_attestation(data_dir):
    done = tay("storage", "init", "--data-dir", str(data_dir))
    assert done.returncode == 1
    assert "sync_requires_validated_filesystem" in done.stderr
    assert not data_dir.exists()


def test_inspect_refusal_reports_class_path_and_offset(data_dir):
    init_store(str(data_dir), durability="write")
    segment = data_dir / "segments" / f"{1:020d}.tay"
    with segment.open("ab") as handle:
        handle.write(b"TA")
    done = tay("storage", "inspect", "--data-dir", str(data_dir), "--json")
    assert done.returncode == 1
    report = json.loads(done.stdout)
    assert report["ok"] is False and report["class"] == "incomplete_tail"
    assert report["path"] == str(segment) and report["offset"] == 44
    text = tay("storage", "inspect", "--data-dir", str(data_dir))
    assert text.returncode == 1 and "incomplete_tail" in text.stdout


@pytest.mark.parametrize(
    ("kind", "path", "ok", "klass"),
    [
        ("record", RECORD_DIR / "f02.bin.hex", True, None),
        ("record", RECORD_DIR / "f05.bin.hex", False, "physical_corruption"),
        ("record", RECORD_DIR / "f06.bin.hex", False, "unsupported_physical"),
        ("segment", SEGMENT_DIR / "s05.tay.hex", True, None),
        ("segment", SEGMENT_DIR / "s10_3.tay.hex", False, "incomplete_tail"),
        ("store", SEGMENT_DIR / "STORE.hex", True, None),
        ("store", SEGMENT_DIR / "s14_STORE.hex", False, "physical_corruption"),
        ("value", EVENT_DIR / "V07.hex", True, None),
        ("value", EVENT_DIR / "X02.hex", False, "invalid_payload"),
        ("event", EVENT_DIR / "E1.hex", True, None),
    ],
)
def test_verify_file_fixture_outcomes(kind, path, ok, klass):
    done = tay("storage", "verify-file", "--kind", kind, str(path))
    lines = done.stdout.splitlines()
    assert len(lines) == 1
    report = json.loads(lines[0])
    assert report["ok"] is ok and done.returncode == (0 if ok else 1)
    if not ok:
        assert report["class"] == klass


def test_verify_file_reads_raw_bytes(tmp_path):
    raw = tmp_path / "STORE"
    raw.write_bytes(bytes.fromhex((SEGMENT_DIR / "STORE.hex").read_text().strip()))
    done = tay("storage", "verify-file", "--kind", "store", str(raw))
    assert done.returncode == 0
    assert json.loads(done.stdout)["store_id"] == "00112233445566778899aabbccddeeff"


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (("storage", "verify-file", "--kind", "blob", "x"), "--kind"),
        (("storage", "inspect"), "--data-dir"),
        (("storage", "init", "--data-dir", "d", "--durability", "fast"), "--durability"),
        (("storage",), "COMMAND"),
        (("storage", "verify-file", "--kind", "record", "/nonexistent/file"), "FILE"),
    ],
)
def test_usage_errors_exit_2_naming_the_flag(args, flag):
    done = tay(*args)
    assert done.returncode == 2
    assert flag in done.stderr


def test_verify_file_labelled_store_v2_fixtures():
    manifests = REPO / "fixtures" / "upstream" / "storage" / "v2" / "phase_c" / "manifests.hex"
    done = tay("storage", "verify-file", "--kind", "manifest", "--label", "zero", str(manifests))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["runtime_retention_ms"] == 3_600_000
    done = tay("storage", "verify-file", "--kind", "manifest", "--label", "nil", str(manifests))
    assert done.returncode == 1 and json.loads(done.stdout)["reason"] == "terminal_retention"
    done = tay("storage", "verify-file", "--kind", "manifest", str(manifests))
    assert done.returncode == 2 and "--label" in done.stderr and "infinity" in done.stderr
