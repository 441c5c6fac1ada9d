"""Admission control: client permits (requests in flight) and the retained-state budget.

``ClientPermits`` is used by the server's driver: every enqueue (both transports) takes one
before the engine sees it and holds it until its reply is released; each permit covers at
most ``client_bytes / client_slots`` request bytes. ``StateBudget``
charges every retained job ``2 * definition bytes + 64 * definition nodes + 2048`` plus its
retained result bytes (protocol.md §2.6). The seeds add auxiliary data to the same budget:
each schedule is charged like a job plus ``MEMBER_BYTES`` per occurrence it still tracks.
"""

from __future__ import annotations

from tay.engine.config import EngineConfig
from tay.failures import RecoveryRefused, RequestRefused

JOB_OVERHEAD_BYTES = 2048
BYTES_PER_NODE = 64
MEMBER_BYTES = 64  # one retained occurrence job id of a schedule (16 bytes + bookkeeping)


def job_charge(definition_bytes: int, definition_nodes: int) -> int:
    """The state-budget charge of one retained job, before any result."""
    return 2 * definition_bytes + BYTES_PER_NODE * definition_nodes + JOB_OVERHEAD_BYTES


def jobs_charge(definition_bytes: int, definition_nodes: int, jobs: int) -> int:
    """The summed ``job_charge`` of ``jobs`` jobs from the sums of their definition bytes
    and nodes (the charge is linear): a columnar run is charged without a call per job."""
    return job_charge(definition_bytes, definition_nodes) + JOB_OVERHEAD_BYTES * (jobs - 1)


def schedule_charge(definition_bytes: int, definition_nodes: int, active_jobs: int) -> int:
    """The state-budget charge of one schedule: like a job's, plus its membership ids."""
    return job_charge(definition_bytes, definition_nodes) + MEMBER_BYTES * active_jobs


class ClientPermits:
    """A fixed pool of request permits; one per request in flight, sized by bytes."""

    def __init__(self, config: EngineConfig) -> None:
        self.slots = config.client_slots
        self.bytes_per_permit = config.client_bytes // config.client_slots
        self.in_use = 0

    def acquire(self, request_bytes: int) -> None:
        """Take a permit for a request of ``request_bytes`` or refuse with ``capacity``."""
        if request_bytes > self.bytes_per_permit:
            raise RequestRefused(
                f"request of {request_bytes} bytes exceeds the {self.bytes_per_permit}-byte permit",
                code="capacity", reason="client_bytes",
            )
        if self.in_use >= self.slots:
            raise RequestRefused(f"all {self.slots} client permits are in use",
                                 code="capacity", reason="client_slots")
        self.in_use += 1

    def release(self) -> None:
        if self.in_use <= 0:
            raise RuntimeError("client permit released more often than acquired")
        self.in_use -= 1


class StateBudget:
    """Charged bytes of all retained jobs and schedules against ``max_state_bytes``.

    ``admitted`` is the part that admission checked (job and schedule definitions);
    everything a running job or schedule adds later (a result, a failure's details, an
    occurrence in a membership) is charged against the margin above it and may take
    ``used`` past the limit: a job can always finish. New work is refused while ``used``
    is at the limit; recovery refuses only a store whose *admitted* state does not fit, so
    a store is never locked by what the same configuration produced while running.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.admitted = 0
        self.refusals = 0  # the server's compaction trigger watches it (expiry may free)

    def admit(self, charge: int) -> None:
        """Refuse a new job whose charge would exceed the budget (nothing is charged)."""
        if self.used + charge > self.limit:
            self.refusals += 1
            raise RequestRefused(
                f"retained state would reach {self.used + charge} of {self.limit} bytes "
                "(max_state_bytes); terminal jobs release their share when they expire under "
                "the terminal retention, or raise --max-state-bytes",
                code="capacity", reason="retained_bytes", required=self.used + charge,
                configured=self.limit,
            )

    def charge(self, amount: int, admitted: bool = False) -> None:
        self.used += amount
        if admitted:
            self.admitted += amount

    def release(self, amount: int, admitted_part: int) -> None:
        """An expired job gives its whole charge back."""
        self.used -= amount
        self.admitted -= admitted_part

    @property
    def over_limit(self) -> bool:
        return self.used > self.limit

    def check_recovered(self) -> None:
        """At recovery: refuse only a store whose admitted state needs more than the budget
        (the same configuration can never have admitted it)."""
        if self.admitted > self.limit:
            raise RecoveryRefused(
                "resource_limit", "max_state_bytes",
                required=self.admitted, configured=self.limit,
                remedy=(f"its retained state needs {self.admitted} bytes but max_state_bytes "
                        f"is {self.limit}: start with --max-state-bytes {self.admitted} or "
                        "more (TAY_MAX_STATE_BYTES), or compact the store with a shorter "
                        "--terminal-retention (tay storage compact)"),
            )
