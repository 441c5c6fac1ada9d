"""The Store-v2 directory layout (storage.md §3.1): names and the root rules.

```
DATA_DIR/
  .tay-owner.lock  STORE  STORE-V2  CURRENT  [ADOPTION]
  epochs/
    e-<32 hex epoch id>/           MANIFEST + segments/ (Segment v1 files, epoch-local ids)
    .tay-candidate-<32 hex>.tmp/   an unpublished candidate (ignored; may leak)
    legacy-<32 hex nonce>/         the v1 segments/ moved aside by the first adoption
```

``classify_root`` lists a v2 root and refuses (kind ``discovery`` unless noted) what §3.1
forbids; ``classify_epoch`` does the same for the selected epoch directory.
"""

from __future__ import annotations

import os
import stat

from tay._frozen import LazyPattern, Record
from tay.failures import RecoveryRefused
from tay.storage.formats.segment import parse_segment_file_name, parse_staging_file_name
from tay.storage.formats.segment_ledger import LEDGER_FILE_NAME
from tay.storage.formats.store_marker import STORE_FILE_NAME, parse_store_staging_name
from tay.storage.fsio import RealIO

LOCK_NAME = ".tay-owner.lock"
STORE_V2_NAME = "STORE-V2"
CURRENT_NAME = "CURRENT"
ADOPTION_NAME = "ADOPTION"
EPOCHS_DIR = "epochs"
MANIFEST_NAME = "MANIFEST"
SEGMENTS_DIR = "segments"
V2_ROOT_NAMES = (STORE_V2_NAME, CURRENT_NAME, ADOPTION_NAME)

_CANDIDATE = LazyPattern(r"\.tay-candidate-([0-9a-f]{32})\.tmp")
_LEGACY = LazyPattern(r"legacy-([0-9a-f]{32})")
# root staging prefix -> largest size (the object it stages)
ROOT_STAGING = {"v2-marker": 28, "current": 76, "adoption": 28}
_ROOT_STAGING = LazyPattern(r"\.tay-(v2-marker|current|adoption)-([0-9a-f]{32})\.tmp")
_ROOT_STAGING_PREFIXES = (".tay-v2-marker-", ".tay-current-", ".tay-adoption-")


def epoch_dir_name(epoch_id: bytes) -> str:
    return f"e-{epoch_id.hex()}"


def candidate_dir_name(nonce: bytes) -> str:
    return f".tay-candidate-{nonce.hex()}.tmp"


def legacy_dir_name(nonce: bytes) -> str:
    return f"legacy-{nonce.hex()}"


def root_staging_name(kind: str, nonce: bytes) -> str:
    """``.tay-current-<hex>.tmp`` and friends (``kind``: v2-marker, current, adoption)."""
    if kind not in ROOT_STAGING:
        raise ValueError(f"unknown root staging kind {kind!r}")
    return f".tay-{kind}-{nonce.hex()}.tmp"


def parse_epoch_dir_name(name: str) -> bytes | None:
    """The id of ``e-<32 lowercase hex>``, else None (string tests: every start reads its
    epoch names, and compiling the pattern cost more than all of them)."""
    if len(name) == 34 and name.startswith("e-") and not name[2:].strip("0123456789abcdef"):
        return bytes.fromhex(name[2:])
    return None


def parse_candidate_dir_name(name: str) -> bytes | None:
    match = _CANDIDATE.fullmatch(name)
    return bytes.fromhex(match.group(1)) if match else None


def parse_legacy_dir_name(name: str) -> bytes | None:
    match = _LEGACY.fullmatch(name)
    return bytes.fromhex(match.group(1)) if match else None


def is_v2_root(names: list[str] | set[str]) -> bool:
    """A root holding STORE-V2, CURRENT or ADOPTION is (or is becoming) Store v2."""
    return any(name in names for name in V2_ROOT_NAMES)


def _refuse(reason: str, path: str, kind: str = "discovery", **extra: object) -> RecoveryRefused:
    return RecoveryRefused(kind, reason, path=path, stage="preflight", **extra)


class RootInventory(Record):
    """One classified listing of a v2 root and its ``epochs/``."""

    __slots__ = ("root", "names", "epochs", "candidates", "legacy", "staging", "unrelated",
                 "fingerprint")
    root: str
    names: set[str]
    epochs: list[bytes]      # published epoch ids
    candidates: list[bytes]  # leaked candidate nonces
    legacy: list[bytes]      # legacy nonces
    staging: list[str]
    unrelated: list[str]
    fingerprint: tuple[tuple[str, int, int], ...]

    def __init__(self, root: str, names: set[str] | None = None,
                 epochs: list[bytes] | None = None, candidates: list[bytes] | None = None,
                 legacy: list[bytes] | None = None, staging: list[str] | None = None,
                 unrelated: list[str] | None = None,
                 fingerprint: tuple[tuple[str, int, int], ...] = ()) -> None:
        self.root = root
        self.names = set() if names is None else names  # a new set and new lists for each
        self.epochs = [] if epochs is None else epochs
        self.candidates = [] if candidates is None else candidates
        self.legacy = [] if legacy is None else legacy
        self.staging = [] if staging is None else staging
        self.unrelated = [] if unrelated is None else unrelated
        self.fingerprint = fingerprint

    def path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    @property
    def epochs_path(self) -> str:
        return os.path.join(self.root, EPOCHS_DIR)


def _entry(io: RealIO, directory: str, name: str) -> os.stat_result:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise _refuse("invalid_utf8_name", os.path.join(directory, name)) from None
    info = io.lstat(os.path.join(directory, name))
    if stat.S_ISLNK(info.st_mode):
        raise _refuse("symlink", os.path.join(directory, name))
    if not (stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode)):
        raise _refuse("unsupported_file_type", os.path.join(directory, name))
    if stat.S_ISREG(info.st_mode) and info.st_nlink != 1:
        raise _refuse("hard_link", os.path.join(directory, name), links=info.st_nlink)
    return info


def _list(io: RealIO, path: str, budget: list[int]) -> list[str]:
    try:
        names = sorted(io.listdir(path))
    except OSError as error:
        raise RecoveryRefused("io", error.strerror or "listdir", path=path,
                              stage="preflight") from None
    budget[0] -= len(names)
    if budget[0] < 0:
        raise _refuse("max_directory_entries", path, kind="resource_limit")
    return names


def classify_root(io: RealIO, root: str, max_entries: int) -> RootInventory:
    """List a v2 root (§3.1 root rules) and its ``epochs/`` directory."""
    inventory = RootInventory(root=root)
    budget = [max_entries]
    prints: list[tuple[str, int, int]] = []
    for name in _list(io, root, budget):
        path = os.path.join(root, name)
        info = _entry(io, root, name)
        prints.append((name, info.st_ino, info.st_size))
        inventory.names.add(name)
        is_dir = stat.S_ISDIR(info.st_mode)
        if name == SEGMENTS_DIR:
            raise _refuse("v2_root_has_v1_segments", path)
        if name == EPOCHS_DIR:
            if not is_dir:
                raise _refuse("epochs_not_directory", path)
            continue
        if is_dir:
            raise _refuse("unexpected_directory", path)
        # the prefixes first: every start lists .tay-owner.lock, and one that finds no
        # staging leftover compiles no pattern
        staging = _ROOT_STAGING.fullmatch(name) if name.startswith(_ROOT_STAGING_PREFIXES) \
            else None
        if staging is not None or parse_store_staging_name(name) is not None:
            cap = ROOT_STAGING[staging.group(1)] if staging is not None else 28
            if info.st_size > cap:
                raise _refuse("oversized_staging", path, size=info.st_size, cap=cap)
            inventory.staging.append(name)
        elif name in (LOCK_NAME, STORE_FILE_NAME, LEDGER_FILE_NAME, *V2_ROOT_NAMES):
            continue
        else:
            inventory.unrelated.append(name)
    if EPOCHS_DIR in inventory.names:
        _classify_epochs(io, inventory, budget, prints)
    inventory.fingerprint = tuple(prints)
    return inventory


def _classify_epochs(io: RealIO, inventory: RootInventory, budget: list[int],
                     prints: list[tuple[str, int, int]]) -> None:
    directory = inventory.epochs_path
    for name in _list(io, directory, budget):
        info = _entry(io, directory, name)
        prints.append((f"{EPOCHS_DIR}/{name}", info.st_ino, info.st_size))
        for parse, bucket in ((parse_epoch_dir_name, inventory.epochs),
                              (parse_candidate_dir_name, inventory.candidates),
                              (parse_legacy_dir_name, inventory.legacy)):
            ident = parse(name)
            if ident is not None:
                if not stat.S_ISDIR(info.st_mode):
                    raise _refuse("epoch_entry_not_directory", os.path.join(directory, name))
                bucket.append(ident)
                break
        else:
            inventory.unrelated.append(f"{EPOCHS_DIR}/{name}")


class EpochInventory(Record):
    """The selected epoch directory: MANIFEST and its canonical segment ids."""

    __slots__ = ("path", "segments_path", "manifest_size", "segment_ids", "segment_sizes",
                 "staging", "fingerprint")
    path: str
    segments_path: str
    manifest_size: int
    segment_ids: list[int]
    segment_sizes: dict[int, int]
    staging: list[str]
    fingerprint: tuple[tuple[str, int, int], ...]

    def __init__(self, path: str, segments_path: str, manifest_size: int, segment_ids: list[int],
                 segment_sizes: dict[int, int], staging: list[str],
                 fingerprint: tuple[tuple[str, int, int], ...]) -> None:
        self.path = path
        self.segments_path = segments_path
        self.manifest_size = manifest_size
        self.segment_ids = segment_ids
        self.segment_sizes = segment_sizes
        self.staging = staging
        self.fingerprint = fingerprint

    def segment_path(self, segment_id: int) -> str:
        from tay.storage.formats.segment import segment_file_name

        return os.path.join(self.segments_path, segment_file_name(segment_id))


MANIFEST_MAX = 16 * 1024 * 1024


def classify_epoch(io: RealIO, path: str, max_entries: int) -> EpochInventory:
    """An epoch holds exactly ``MANIFEST`` and ``segments/``; segments/ only segment files
    and their staging names (§3.5, §3.7 step 4)."""
    budget = [max_entries]
    prints: list[tuple[str, int, int]] = []
    names = _list(io, path, budget)
    if names != [MANIFEST_NAME, SEGMENTS_DIR]:
        raise _refuse("epoch_entries", path, found=names[:8])
    manifest = _entry(io, path, MANIFEST_NAME)
    if not stat.S_ISREG(manifest.st_mode):
        raise _refuse("manifest_not_regular", os.path.join(path, MANIFEST_NAME))
    if not 1 <= manifest.st_size <= MANIFEST_MAX:
        raise _refuse("manifest_size", os.path.join(path, MANIFEST_NAME),
                      kind="physical_corruption", size=manifest.st_size)
    segments = os.path.join(path, SEGMENTS_DIR)
    info = _entry(io, path, SEGMENTS_DIR)
    if not stat.S_ISDIR(info.st_mode):
        raise _refuse("segments_not_directory", segments)
    prints.append((MANIFEST_NAME, manifest.st_ino, manifest.st_size))
    prints.append((SEGMENTS_DIR, info.st_ino, 0))
    ids: list[int] = []
    sizes: dict[int, int] = {}
    staging: list[str] = []
    for name in _list(io, segments, budget):
        entry = _entry(io, segments, name)
        file_path = os.path.join(segments, name)
        prints.append((f"{SEGMENTS_DIR}/{name}", entry.st_ino, entry.st_size))
        if stat.S_ISDIR(entry.st_mode):
            raise _refuse("unexpected_directory", file_path)
        segment_id = parse_segment_file_name(name)
        if segment_id is not None:
            if entry.st_size == 0:
                raise _refuse("zero_byte_canonical", file_path)
            ids.append(segment_id)
            sizes[segment_id] = entry.st_size
        elif parse_staging_file_name(name) is not None:
            if entry.st_size > 44:
                raise _refuse("oversized_staging", file_path, size=entry.st_size, cap=44)
            staging.append(name)
        else:
            raise _refuse("unrelated_file_in_epoch", file_path)
    ids.sort()
    for expected, segment_id in enumerate(ids, start=1):
        if segment_id != expected:
            raise RecoveryRefused("continuity", "segment_id_gap", path=segments,
                                  segment_id=segment_id, stage="preflight",
                                  expected_segment_id=expected)
    return EpochInventory(path, segments, manifest.st_size, ids, sizes, staging, tuple(prints))


def history_dir(root: str) -> str:
    """The directory of the segments a store appends to: ``segments/`` of a v1 store, or
    ``epochs/e-<id>/segments`` of the epoch CURRENT names (no checks: tools and tests)."""
    from tay.storage.v2.markers import decode_current

    current = os.path.join(root, CURRENT_NAME)
    if not os.path.exists(current):
        return os.path.join(root, SEGMENTS_DIR)
    with open(current, "rb") as handle:
        epoch_id = decode_current(handle.read()).epoch_id
    return os.path.join(root, EPOCHS_DIR, epoch_dir_name(epoch_id), SEGMENTS_DIR)
