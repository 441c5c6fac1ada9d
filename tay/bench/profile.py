"""Workload profiles: ``profiles/<name>.toml`` loaded into a validated ``Profile``.

A profile describes the workload shape only (jobs, callers, queues, payload, durability);
how many processes carry the callers and workers is a harness setting with defaults
here, so one profile stays comparable across machines.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from typing import Any

from tay.failures import ConfigurationError

PROFILE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "profiles")
QUEUE_RULES = ("even-odd",)


@dataclass(frozen=True)
class Profile:
    """One validated workload profile."""

    name: str
    jobs: int
    callers: int
    task: str
    queues: dict[str, int]
    payload_bytes: int
    expected_events: int
    retries: int = 0
    queue_rule: str = "even-odd"
    durability: str = "sync"
    group_commit_max_events: int = 1
    group_commit_interval_ms: int = 0
    producer_processes: int = 2
    worker_processes: int = 1
    worker_capacity: int = 8
    source: str = field(default="", compare=False)

    def queue_for(self, index: int) -> str:
        """Job ``index`` goes to the first queue when even, the second when odd."""
        names = list(self.queues)
        return names[index % 2] if len(names) > 1 else names[0]

    def job_args(self) -> dict[str, Any]:
        return {"account_key": "benchmark-account", "payload": "x" * self.payload_bytes,
                "version": 1}


def resolve_profile_path(name_or_path: str) -> str:
    """A path as given if it exists, else ``profiles/<name>.toml``."""
    if os.path.isfile(name_or_path):
        return name_or_path
    candidate = os.path.join(PROFILE_DIR, f"{name_or_path}.toml")
    if os.path.isfile(candidate):
        return candidate
    known = sorted(f[:-5] for f in os.listdir(PROFILE_DIR) if f.endswith(".toml")) \
        if os.path.isdir(PROFILE_DIR) else []
    raise ConfigurationError("PROFILE", f"{name_or_path!r} is neither a file nor one of "
                                        f"{', '.join(known) or 'no profiles'} in {PROFILE_DIR}")


def load_profile(name_or_path: str) -> Profile:
    path = resolve_profile_path(name_or_path)
    try:
        with open(path, "rb") as handle:
            document = tomllib.load(handle)
    except tomllib.TOMLDecodeError as error:
        raise ConfigurationError(path, f"not valid TOML: {error}") from None
    return profile_from_dict(document, source=path)


def profile_from_dict(document: dict[str, Any], source: str = "<dict>") -> Profile:
    """Validate every field; errors name the file and the field."""
    def need(key: str, kind: type, low: int | None = None) -> Any:
        if key not in document:
            raise ConfigurationError(f"{source}: {key}", "is required")
        return _typed(document[key], kind, f"{source}: {key}", low)

    def optional(key: str, kind: type, default: Any, low: int | None = None) -> Any:
        return _typed(document.get(key, default), kind, f"{source}: {key}", low)

    queues = need("queues", dict)
    if not queues:
        raise ConfigurationError(f"{source}: queues", "needs at least one queue")
    for queue, credits in queues.items():
        _typed(credits, int, f"{source}: queues.{queue}", 1)
    rule = optional("queue_rule", str, "even-odd")
    if rule not in QUEUE_RULES:
        raise ConfigurationError(f"{source}: queue_rule", f"{rule!r} is not one of {QUEUE_RULES}")
    durability = optional("durability", str, "sync")
    if durability not in ("sync", "write"):
        raise ConfigurationError(f"{source}: durability", f"{durability!r} is not sync or write")
    group = optional("group_commit", dict, {})
    return Profile(
        name=need("name", str), jobs=need("jobs", int, 1), callers=need("callers", int, 1),
        task=need("task", str), queues=dict(queues),
        payload_bytes=need("payload_bytes", int, 0),
        expected_events=need("expected_events", int, 0),
        retries=optional("retries", int, 0, 0), queue_rule=rule, durability=durability,
        group_commit_max_events=_typed(group.get("max_events", 1), int,
                                       f"{source}: group_commit.max_events", 1),
        group_commit_interval_ms=_typed(group.get("interval_ms", 0), int,
                                        f"{source}: group_commit.interval_ms", 0),
        producer_processes=optional("producer_processes", int, 2, 1),
        worker_processes=optional("worker_processes", int, 1, 1),
        worker_capacity=optional("worker_capacity", int, 8, 1),
        source=source,
    )


def _typed(value: Any, kind: type, where: str, low: int | None) -> Any:
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ConfigurationError(where, f"must be {kind.__name__}, got {value!r}")
    if low is not None and value < low:
        raise ConfigurationError(where, f"must be >= {low}, got {value}")
    return value
