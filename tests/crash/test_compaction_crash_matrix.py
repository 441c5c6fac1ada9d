"""The crash matrix of offline compaction (storage.md §3.8) and of the first v1->v2 adoption.

A dry run of each compaction numbers every disk-changing operation it performs (recovery's
activation, sealing the source tail, the candidate's directories, base segments, MANIFEST
and tail, the epoch's rename, ADOPTION / the legacy move / STORE-V2, the CURRENT switch,
every unlink and directory fsync of the reclaim), and the matrix has one case per operation
index, crash mode and source: adding a step to compaction adds its cases. Each case runs the
same compaction on a fresh copy of the store and stops it before operation N (``PowerCutIO``,
tests/crash/powercut.py), leaves the disk as a kill -9 ("kill"), a power cut ("power") or
a power cut in the middle of writing back ("torn": half of each file's unsynced bytes
survive) would, and then checks:

* recovery (as ``tay serve`` runs it) selects exactly one authority: the old store (v1, or
  the source epoch) if the crash came before the CURRENT switch was made durable, else the
  new epoch; never a candidate, never a partial epoch;
* the recovered durable state is exactly the state before the compaction (old authority) or
  exactly that state minus the expired terminal jobs (new authority): every job, result,
  failure detail, order of the available jobs, paused queue and schedule;
* a torn tail of the authority's highest segment is refused as one, naming the repair,
  and after ``tay storage repair`` the above holds (no automatic torn-tail repair);
* a second compaction then succeeds, leaves one epoch and nothing else behind (no candidate,
  legacy directory, ADOPTION or staging file), and gives the same state.

Sources: ``v1`` (the first adoption of a v1 store) and ``v2`` (a compacted store with a
tail). A second matrix interrupts the rollback of an interrupted adoption (§3.7 step 2) at
each of its operations: the next start must roll back again and give the v1 store back.
Four cases kill a real subprocess (SIGKILL at the operation, ``tests/crash/kill_at.py``) to
check that the in-process kill mode assumes what a real kill leaves. The default native twin runs the whole matrix; the other twin runs the kill-mode
cases of the steps that differ between twins (writes and renames). ``TAY_CRASH_MATRIX=full``
runs a bigger store (more segments on both sides) and every twin.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

import tay._native
from tay.engine import Engine
from tay.failures import RecoveryRefused
from tay.storage.recovery.physical import is_torn_tail
from tay.storage.recovery.repair import repair_store
from tay.storage.compaction.offline import compact_offline
from tay.storage.v2 import Retention
from tay.storage.v2 import layout as v2_layout
from tests.crash.compaction_store import (
    CAPTURE, HOUR, continue_in_epoch, engine_config, expired_at, open_engine,
    stored_state, write_v1_history,
)
from tests.crash.cluster import REPO, tree_digest
from tests.crash.powercut import Crash, Plan, PowerCutIO
from tests.scratch import scratch_dir

FULL = os.environ.get("TAY_CRASH_MATRIX") == "full"
SOURCES = ("v1", "v2")
MODES = ("kill", "power", "torn")
RETENTION = Retention("hours", 1)
# segment size: several source and base segments (full: many)
ROTATION = 2048 if FULL else 6144
HEX = re.compile(r"[0-9a-f]{32}")


def twins() -> list[str]:
    from tay._native import pure

    names = [tay._native.IMPLEMENTATION]
    if pure is not None and "python" not in names:
        names.append("python")
    return names


def native(twin: str):
    if twin == "python":
        from tay._native import pure

        return pure
    return tay._native


def compact(root: Path, io: PowerCutIO):
    # strict sync, as §3.8 describes it (the scratch root is a validated filesystem)
    return compact_offline(str(root), consumer=Engine(engine_config()), retention=RETENTION,
                           now_ms=lambda: CAPTURE, io=io, durability="sync",
                           validated_filesystem=True, rotation_target=ROTATION,
                           allow_small_rotation_target_for_tests=True)


@cache
def template(source: str) -> Path:
    """The store each case copies (built once per test process)."""
    root = scratch_dir(f"matrix-{source}-") / "data"
    write_v1_history(root, scale=3 if FULL else 1, rotation=ROTATION)
    if source == "v2":
        compact_offline(str(root), consumer=Engine(engine_config()),
                        retention=Retention("infinity"), now_ms=lambda: CAPTURE,
                        durability="write", rotation_target=ROTATION,
                        allow_small_rotation_target_for_tests=True)
        continue_in_epoch(root, rotation=ROTATION)
    return root


def fresh_copy(source: str) -> Path:
    root = scratch_dir(f"case-{source}-") / "data"
    shutil.copytree(template(source), root, symlinks=True)
    return root


class DryRun:
    """One uninterrupted compaction of the template: its operations and both states."""

    def __init__(self, source: str) -> None:
        root = fresh_copy(source)
        version, self.old_epoch, self.before = stored_state(root)
        assert version == (1 if source == "v1" else 2)
        io = PowerCutIO()
        result = compact(root, io)
        assert result.reclaimed and result.expired_jobs > 0
        self.new_epoch = result.epoch_id
        self.plan = Plan(str(root), io.operations)
        self.after = expired_at(self.before, CAPTURE, RETENTION.count * HOUR)
        assert stored_state(root)[2] == self.after
        switch = self.plan.first("rename_replace" if source == "v2" else "rename", "/CURRENT")
        self.switch = switch  # the kill of a process after this operation: new authority
        self.switch_durable = self.plan.next_after(switch, "fsync_dir", str(root))
        shutil.rmtree(root.parent)

    def stable_label(self, index: int) -> str:
        return stable(self.plan, index)

    def new_authority(self, mode: str, crash_at: int) -> bool:
        """Whether operation ``crash_at`` came after the switch (kill: the rename happened;
        power: the root's fsync after it happened)."""
        last_done = crash_at - 1
        return last_done >= (self.switch if mode == "kill" else self.switch_durable)


def stable(plan: Plan, index: int) -> str:
    """An operation's label without its random ids (a test id)."""
    if index > len(plan.operations):
        return "completed"
    label = plan.operations[index - 1].label(plan.root)
    return HEX.sub("X", label).replace("/", "_").replace(" ", "-")


@cache
def dry_run(source: str) -> DryRun:
    return DryRun(source)


@cache
def pending_adoption() -> Path:
    """A first adoption killed just before its CURRENT was staged: ADOPTION, the legacy
    move and STORE-V2 are all published, the new epoch too, and no CURRENT."""
    run = dry_run("v1")
    root = fresh_copy("v1")
    io = PowerCutIO(crash_at=next(
        op.index for op in run.plan.operations
        if op.kind == "open_create" and os.path.basename(op.path).startswith(".tay-current-")))
    with pytest.raises(Crash):
        compact(root, io)
    io.crash("kill", str(root))
    assert {"ADOPTION", "STORE-V2"} <= set(os.listdir(root)) and "CURRENT" not in os.listdir(root)
    return root


def pending_copy() -> Path:
    root = scratch_dir("rollback-") / "data"
    shutil.copytree(pending_adoption(), root, symlinks=True)
    return root


@cache
def rollback_dry_run() -> Plan:
    """Every disk operation of recovery as serve runs it on the pending adoption: the
    rollback (§3.7 step 2) and the activation after it."""
    root = pending_copy()
    io = PowerCutIO()
    open_engine(root, activate=True, io=io).recovered.journal.close()
    plan = Plan(str(root), io.operations)
    assert plan.first("rename", "/segments") < plan.first("unlink", "/ADOPTION")
    shutil.rmtree(root.parent)
    return plan


def cases() -> list:
    out = []
    for source in SOURCES:
        run = dry_run(source)
        indices = range(1, len(run.plan.operations) + 2)
        for twin in twins():
            default = twin == tay._native.IMPLEMENTATION
            for mode in MODES:
                for index in indices:
                    kind = (run.plan.operations[index - 1].kind
                            if index <= len(run.plan.operations) else "completed")
                    if not (FULL or default or (mode == "kill" and kind in ("write", "rename"))):
                        continue
                    out.append(pytest.param(source, twin, mode, index,
                                            id=f"{source}-{twin}-{mode}-{index:03d}-"
                                               f"{run.stable_label(index)}"))
    return out


def pytest_generate_tests(metafunc):
    if "crash_at" in metafunc.fixturenames:
        metafunc.parametrize("source,twin,mode,crash_at", cases())
    if "rollback_at" in metafunc.fixturenames:
        plan = rollback_dry_run()
        metafunc.parametrize("mode,rollback_at", [
            pytest.param(mode, index, id=f"{mode}-{index:03d}-{stable(plan, index)}")
            for mode in MODES for index in range(1, len(plan.operations) + 2)])


def published_epoch(io: PowerCutIO) -> bytes | None:
    """The epoch id the (crashed) compaction published, if it got that far (ids are random:
    each run has its own)."""
    for op in io.operations:
        name = os.path.basename(op.path)
        if op.kind == "rename" and name.startswith("e-"):
            return v2_layout.parse_epoch_dir_name(name)
    return None


# Crash states already verified, by shape. Compaction only creates, appends to, renames and
# removes files (PowerCutIO refuses any other write), so two crash states with the same
# shape (every path and its size, ids masked but the selected epoch's kept apart) are the
# same state up to random ids;
# fsyncs change nothing in kill mode, and a power cut folds every step of an unsynced
# directory into one state. A case whose state was verified by an earlier case only checks
# that it expects the same authority: the matrix stays complete and takes seconds.
_VERIFIED: dict[tuple, bool] = {}  # shape -> whether the new epoch is authoritative


def tree_shape(root: Path) -> tuple:
    """Every path with its size; ids masked, except that the epoch CURRENT names stays
    distinguishable from the others (the relation is what recovery reads)."""
    selected = None
    if (root / v2_layout.CURRENT_NAME).exists():
        selected = (root / v2_layout.CURRENT_NAME).read_bytes()[24:40].hex()

    def mask(path: str) -> str:
        if selected is not None:
            path = path.replace(selected, "SELECTED")
        return HEX.sub("X", path)

    out = []
    for directory, dirs, files in os.walk(root):
        rel = os.path.relpath(directory, root)
        out += [(mask(os.path.join(rel, name)), -1) for name in dirs]
        out += [(mask(os.path.join(rel, name)), os.lstat(os.path.join(directory, name)).st_size)
                for name in files]
    return tuple(sorted(out))


def leftovers(root: Path) -> list[str]:
    """Anything a finished compaction must not leave: candidates, legacy directories,
    more than one epoch, ADOPTION, staging files."""
    epochs = sorted(os.listdir(root / v2_layout.EPOCHS_DIR))
    out = [f"epochs/{name}" for name in epochs if not name.startswith("e-")]
    if len([name for name in epochs if name.startswith("e-")]) != 1:
        out.append(f"epochs: {epochs}")
    out += [name for name in os.listdir(root)
            if name == v2_layout.ADOPTION_NAME or name == "segments" or name.endswith(".tmp")]
    return out


def repair_a_torn_tail(root: Path, twin: str) -> None:
    """A torn power cut may end the authority's highest segment inside a record compaction
    was appending (the source tail's footer): recovery refuses it, naming the repair (there
    is no automatic torn-tail repair, compatibility-and-limits.md), and ``tay storage
    repair`` cuts exactly the torn bytes, keeping them in a side file. Anything else is a
    failure of the case."""
    try:
        stored_state(root, io=PowerCutIO(native(twin)))
    except RecoveryRefused as refusal:
        assert is_torn_tail(refusal) and "tay storage repair" in str(refusal), refusal
        torn_size = os.path.getsize(refusal.path) - refusal.offset
        outcome = repair_store(str(root), io=PowerCutIO(native(twin)))
        assert outcome.repaired and outcome.removed_bytes == torn_size > 0
        assert os.path.getsize(refusal.path) == refusal.offset
        side = Path(outcome.side_file)
        assert side.parent == root and side.stat().st_size == torn_size
        side.unlink()  # the operator's to keep; the matrix compares trees without it


def test_a_crash_at_any_operation_leaves_one_authority_and_every_acknowledged_state(
        source, twin, mode, crash_at):
    run = dry_run(source)
    root = fresh_copy(source)
    try:
        io = PowerCutIO(native(twin), crash_at=crash_at)
        try:
            result = compact(root, io)
        except Crash:
            io.crash(mode, str(root))
            completed = False
        else:
            assert crash_at == len(run.plan.operations) + 1 and result.reclaimed
            completed = True
        new = completed or run.new_authority(mode, crash_at)

        expected = ((2, published_epoch(io)), run.after) if new else (
            ((1, None) if source == "v1" else (2, run.old_epoch)), run.before)
        shape = (source, tree_shape(root))  # the twins must reach the same states
        if shape in _VERIFIED:  # this very disk state was checked by an earlier case
            assert _VERIFIED[shape] == new
            return
        if mode == "torn":
            repair_a_torn_tail(root, twin)
        # read-only (tay storage inspect): the authority, and not a byte changed
        untouched = tree_digest(root)
        version, epoch, state = stored_state(root, io=PowerCutIO(native(twin)))
        assert ((version, epoch), state) == expected
        assert tree_digest(root) == untouched
        # recovery as tay serve runs it (an interrupted adoption is rolled back here)
        open_engine(root, activate=True, io=PowerCutIO(native(twin))).recovered.journal.close()

        # and the next compaction finishes the job and cleans up
        again = compact(root, PowerCutIO(native(twin)))
        assert again.reclaimed, again.reclaim_error
        assert leftovers(root) == []
        version, epoch, state = stored_state(root)
        assert (version, epoch) == (2, again.epoch_id) and state == run.after
        _VERIFIED[shape] = new
    finally:
        shutil.rmtree(root.parent, ignore_errors=True)


def test_the_dry_runs_cover_every_step_of_the_publication_flow():
    """The matrix is only as good as the operations the dry run sees: each §3.8 step (and
    adoption's) must be among them, in the documented order."""
    for source in SOURCES:
        plan = dry_run(source).plan
        labels = plan.labels()
        steps = [("mkdir", ".tmp"), ("open_create", "/MANIFEST"), ("rename", "e-"),
                 ("rename" if source == "v1" else "rename_replace", "/CURRENT")]
        if source == "v1":
            steps[3:3] = [("rename", "/ADOPTION"), ("rename", "legacy-"),
                          ("rename", "/STORE-V2")]
        found = [plan.first(kind, name) if not name.endswith("-") else
                 next(op.index for op in plan.operations if op.kind == kind
                      and os.path.basename(op.path).startswith(name)) for kind, name in steps]
        assert found == sorted(found), labels
        reclaim = [op for op in plan.operations[found[-1]:] if op.kind in ("unlink", "rmdir")]
        assert reclaim, labels
        # every reclaim removal is followed by a directory fsync before the next removal
        kinds = [op.kind for op in plan.operations[found[-1]:]]
        for i, kind in enumerate(kinds):
            if kind in ("unlink", "rmdir"):
                assert kinds[i + 1] == "fsync_dir", labels


def test_a_crash_inside_the_adoption_rollback_is_rolled_back_again(mode, rollback_at):
    """The rollback of an interrupted adoption is itself interrupted at every operation:
    the next start rolls back what is left, and the v1 store comes back whole."""
    run = dry_run("v1")
    root = pending_copy()
    try:
        io = PowerCutIO(crash_at=rollback_at)
        try:
            open_engine(root, activate=True, io=io).recovered.journal.close()
        except Crash:
            io.crash(mode, str(root))
        assert stored_state(root) == (1, None, run.before)  # read-only: the v1 store
        open_engine(root, activate=True, io=PowerCutIO()).recovered.journal.close()
        assert stored_state(root) == (1, None, run.before)
        assert "ADOPTION" not in os.listdir(root) and "STORE-V2" not in os.listdir(root)
        again = compact(root, PowerCutIO())
        assert again.adopted and again.reclaimed and leftovers(root) == []
        assert stored_state(root) == (2, again.epoch_id, run.after)
    finally:
        shutil.rmtree(root.parent, ignore_errors=True)


def _after(plan: Plan, kind: str, name: str) -> int:
    """The index of the operation just after the first ``kind`` on a ``name`` path."""
    return next(op.index for op in plan.operations
                if op.kind == kind and os.path.basename(op.path).startswith(name)) + 1


@pytest.mark.parametrize(("source", "where", "new"), [
    ("v1", lambda p: _after(p, "rename", "legacy-"), False),   # mid-adoption
    ("v1", lambda p: _after(p, "rename", "CURRENT"), True),    # just switched
    ("v2", lambda p: _after(p, "rename_replace", "CURRENT"), True),
    ("v2", lambda p: _after(p, "unlink", "0"), True),          # inside the reclaim
])
def test_a_real_kill_leaves_what_the_kill_mode_assumes(source, where, new):
    """The same compaction in a subprocess, SIGKILLed at the operation: no ``finally``
    runs, the kernel releases the lock, and recovery finds the expected authority and state."""
    run = dry_run(source)
    index = where(run.plan)
    root = fresh_copy(source)
    try:
        done = subprocess.run([sys.executable, "-m", "tests.crash.kill_at", str(root), str(index)],
                              cwd=REPO, capture_output=True, timeout=120)
        assert done.returncode == -signal.SIGKILL, done.stderr.decode()[-2000:]
        version, epoch, state = stored_state(root)
        if new:
            assert version == 2 and epoch not in (None, run.old_epoch) and state == run.after
        else:
            assert (version, epoch, state) == (
                (1, None, run.before) if source == "v1" else (2, run.old_epoch, run.before))
        open_engine(root, activate=True).recovered.journal.close()
        again = compact(root, PowerCutIO())
        assert again.reclaimed and leftovers(root) == []
        assert stored_state(root) == (2, again.epoch_id, run.after)
    finally:
        shutil.rmtree(root.parent, ignore_errors=True)


@pytest.mark.parametrize("source", SOURCES)
def test_the_torn_mode_reaches_a_torn_tail_of_the_authority(source):
    """The torn cases are not vacuous: a torn power cut before the sync of the source tail's
    seal leaves a store that recovery refuses as a torn tail until it is repaired."""
    plan = dry_run(source).plan
    sealed = next(op.index for op in plan.operations[1:]
                  if op.kind in ("fsync", "fdatasync") and op.path.endswith(".tay")
                  and plan.operations[op.index - 2].kind == "write"
                  and plan.operations[op.index - 2].path == op.path)
    root = fresh_copy(source)
    try:
        io = PowerCutIO(crash_at=sealed)
        with pytest.raises(Crash):
            compact(root, io)
        io.crash("torn", str(root))
        with pytest.raises(RecoveryRefused) as refused:
            stored_state(root)
        assert is_torn_tail(refused.value) and refused.value.reason == "incomplete_footer"
        repair_a_torn_tail(root, tay._native.IMPLEMENTATION)
        assert stored_state(root)[2] == dry_run(source).before
    finally:
        shutil.rmtree(root.parent, ignore_errors=True)
