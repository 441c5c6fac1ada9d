"""``tay serve`` options of Store v2: terminal retention and the automatic compaction.

| flag | variable | default |
|---|---|---|
| ``--terminal-retention infinity|<N>m|<N>h|<N>d`` | ``TAY_TERMINAL_RETENTION`` | ``24h`` |
| ``--compaction on|off`` | ``TAY_COMPACTION`` | ``on`` |
| ``--compact-history-bytes N`` (size suffixes allowed) | ``TAY_COMPACT_HISTORY_BYTES`` | 64 MiB |
| ``--compact-ratio R`` | ``TAY_COMPACT_RATIO`` | ``2.0`` |
| ``--compact-state-ratio F`` | ``TAY_COMPACT_STATE_RATIO`` | ``0.5`` |
| ``--compact-on-stop on|off`` | ``TAY_COMPACT_ON_STOP`` | ``off`` |

The retention applies to a store that has none yet (a v1 store, adopted to Store v2 when
``tay serve`` starts with compaction on); a Store-v2 store runs with the retention its last
compaction made durable, which overrides this option (storage.md §3.4). Change it with
``tay storage compact --terminal-retention`` (or the admin ``compact`` action).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from tay.failures import ConfigurationError
from tay.storage.compaction.trigger import (
    DEFAULT_HISTORY_BYTES, DEFAULT_RATIO, DEFAULT_STATE_RATIO, MAX_STATE_RATIO, MIN_RATIO,
    MIN_STATE_RATIO, CompactionPolicy,
)
from tay.storage.v2.manifest import Retention, parse_retention

from ..flag_values import parse_size

if TYPE_CHECKING:
    import argparse

DEFAULT_RETENTION = "24h"


def add_compaction_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--terminal-retention", metavar="infinity|<N>m|<N>h|<N>d",
        help="how long completed, cancelled and discarded jobs are kept before a compaction "
             f"drops them (default {DEFAULT_RETENTION}; 0h purges them all once); a Store-v2 "
             "store keeps the retention its last compaction stored (TAY_TERMINAL_RETENTION)")
    add("--compaction", choices=("on", "off"),
        help="compact the store automatically (default on; a v1 store is adopted to Store "
             "v2 at start) (TAY_COMPACTION)")
    add("--compact-history-bytes",
        help=f"compact once the store's history reaches this size (default "
             f"{DEFAULT_HISTORY_BYTES // 2**20} MiB; size suffixes allowed) and is --compact-ratio "
             "times the last base (TAY_COMPACT_HISTORY_BYTES)")
    add("--compact-ratio",
        help=f"history / last base ratio that makes a compaction due, at least {MIN_RATIO} "
             f"(default {DEFAULT_RATIO}) (TAY_COMPACT_RATIO)")
    add("--compact-state-ratio",
        help="also compact once the retained state reaches this fraction of "
             f"--max-state-bytes, between {MIN_STATE_RATIO} and {MAX_STATE_RATIO} (default "
             f"{DEFAULT_STATE_RATIO}), if expired terminal jobs hold a quarter of the state "
             "(at least 1/16 of the budget), or anything once less than 1/8 of the budget "
             "is left (TAY_COMPACT_STATE_RATIO)")
    add("--compact-on-stop", choices=("on", "off"),
        help="compact at a clean stop (SIGTERM/SIGINT) once the epoch's tail holds at least "
             "4 KiB and 1/16 of the base, so the next start replays snapshots instead of the "
             "tail: a faster restart for a slower stop (about 1 s per 10,000 retained "
             "reference jobs; a kill meanwhile is safe) (default off) (TAY_COMPACT_ON_STOP)")


def compaction_config(args: argparse.Namespace,
                      env: Mapping[str, str]) -> tuple[Retention, CompactionPolicy]:
    """The retention and the policy, refused under the option's name when invalid."""
    text = getattr(args, "terminal_retention", None) or env.get("TAY_TERMINAL_RETENTION",
                                                                DEFAULT_RETENTION)
    option = "--terminal-retention" if getattr(args, "terminal_retention", None) else \
        "TAY_TERMINAL_RETENTION"
    try:
        retention = parse_retention(text)
    except ValueError as error:
        raise ConfigurationError(option, str(error)) from None
    switch = getattr(args, "compaction", None) or env.get("TAY_COMPACTION", "on")
    if switch not in ("on", "off"):
        raise ConfigurationError("TAY_COMPACTION", f"{switch!r} must be on or off")
    on_stop = getattr(args, "compact_on_stop", None) or env.get("TAY_COMPACT_ON_STOP", "off")
    if on_stop not in ("on", "off"):
        raise ConfigurationError("TAY_COMPACT_ON_STOP", f"{on_stop!r} must be on or off")
    size_text = getattr(args, "compact_history_bytes", None) or env.get(
        "TAY_COMPACT_HISTORY_BYTES", str(DEFAULT_HISTORY_BYTES))
    history_bytes = parse_size("--compact-history-bytes", size_text)
    ratio_text = getattr(args, "compact_ratio", None) or env.get("TAY_COMPACT_RATIO",
                                                                 str(DEFAULT_RATIO))
    try:
        ratio = float(ratio_text)
    except ValueError:
        raise ConfigurationError("--compact-ratio", f"{ratio_text!r} is not a number") from None
    state_option = "--compact-state-ratio" if getattr(args, "compact_state_ratio", None) \
        else "TAY_COMPACT_STATE_RATIO"
    state_text = getattr(args, "compact_state_ratio", None) or env.get(
        "TAY_COMPACT_STATE_RATIO", str(DEFAULT_STATE_RATIO))
    try:
        state_ratio = float(state_text)
    except ValueError:
        raise ConfigurationError(state_option, f"{state_text!r} is not a number") from None
    try:
        policy = CompactionPolicy(enabled=switch == "on", history_bytes=history_bytes,
                                  ratio=ratio, state_ratio=state_ratio,
                                  on_stop=on_stop == "on")
    except ValueError as error:
        text = str(error)
        option = state_option if text.startswith("state_ratio") else \
            "--compact-ratio" if "ratio" in text else "--compact-history-bytes"
        raise ConfigurationError(option, str(error)) from None
    return retention, policy
