"""Schedules inside the engine: the four schedule requests, occurrence delivery and replay.

The ``ScheduleTable`` (tay.engine.schedules.table) proposes events; this module sequences them
from the engine's one counter, appends them to the Outcome and applies them, so every reply
is released only after its schedule mutation is durable (docs/engine.md). Delivery admits an
occurrence as a job with a stable id and appends the (11,2) ``delivered`` event AFTER that
job's insert in the same Outcome: advancement is never durable before the admission.

Each schedule is charged to the shared state budget (seeds, "Shared budget").
"""

from __future__ import annotations

import json
from typing import Any

from tay.engine.admission import job_charge, schedule_charge
from tay.engine.commands import CancelSchedule, ListSchedules, Schedule, ScheduleStatus
from tay.engine.config import EngineConfig
from tay.engine.effects import Outcome
from tay.engine.validation.ids import RandomSource, random_token
from tay.engine.validation.options import parse_enqueue
from tay.engine.schedules.table import Occurrence, ScheduleState, ScheduleTable
from tay.engine.validation.values import measure
from tay.engine.handlers.workers import WorkerCommands
from tay.failures import RequestRefused
from tay.storage import events as ev
from tay.storage.formats import value
from tay.storage.events import Event
from tay.storage.events import schedules as se_pairs

# Occurrences delivered per tick at most: a long catch_up=all backlog is worked off over
# several ticks (next_wakeup stays due) so other work is never starved.
DELIVERIES_PER_TICK = 1_000
# JSON bytes reserved around a page's objects: envelope fields and a 128-byte cursor that
# may be escaped up to six-fold.
PAGE_ENVELOPE_BYTES = 1_024


class _FixedBytes:
    """A 'random' source for validating occurrence options: the id it yields is discarded."""

    def randbytes(self, n: int) -> bytes:
        return b"\x01" * n

    def randint(self, a: int, b: int) -> int:
        return a


def _json_size(obj: Any) -> int:
    return len(json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))


def request_fields(body: Any, allowed: frozenset[str], request: str) -> dict[str, Any]:
    """A request body that is an object with no field outside ``allowed``."""
    if not isinstance(body, dict):
        raise RequestRefused(f"{request} needs an object body", code="invalid_request")
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise RequestRefused(f"unknown {request} field {unknown[0]!r}", code="invalid_request",
                             field=unknown[0])
    return body


class ScheduleCommands(WorkerCommands):
    def __init__(self, config: EngineConfig | None = None, rng: RandomSource | None = None) -> None:
        super().__init__(config, rng)
        self.schedules = ScheduleTable(options_validator=self._check_occurrence_options,
                                       new_id=lambda: random_token(self.rng))
        # schedule id -> (definition bytes, definition nodes, charged bytes, of which admitted)
        self._schedule_charges: dict[str, tuple[bytes, int, int, int]] = {}
        self._declaring_at = 0  # now_ms of the declaration being validated

    # ---- the engine side of the table contract --------------------------------------

    def schedule_job_state(self, job_id: bytes) -> str | None:
        """The lookup the table uses: a job is busy until its execution is settled here."""
        entry = self.jobs.get(job_id)
        if entry is None:
            found = self.finished.where(job_id)  # held in columns: finished
            return None if found is None else found[0].state(found[1])
        return "executing" if entry.reservation_id is not None else entry.state.state

    def _check_occurrence_options(self, task: str, args: dict, options: dict) -> None:
        """An occurrence is an enqueue: the same option and size rules, checked up front."""
        parse_enqueue(task, args, options, self._declaring_at, self.config, _FixedBytes())

    def _apply_schedule(self, sequence: int, event: Event) -> ScheduleState:
        """Apply one schedule event (live or replay) and bring its budget charge in line."""
        state = self.schedules.apply(sequence, event)
        if event.pair == se_pairs.SCHEDULE_DELIVERED:  # the admin job view names its schedule
            self.link_schedule(event["job_id"], state.schedule_id)
        previous = self._schedule_charges.get(state.schedule_id)
        if previous is not None and previous[0] == state.definition_bytes:
            nodes = previous[1]  # measuring is most of a replayed event's cost: reuse it
        else:
            nodes = measure(dict(state.definition), "definition").nodes
        charge = schedule_charge(len(state.definition_bytes), nodes, len(state.active))
        admitted = job_charge(len(state.definition_bytes), nodes)  # the membership is margin
        old_charge, old_admitted = (previous[2], previous[3]) if previous is not None else (0, 0)
        self.budget.charge(charge - old_charge)
        self.budget.admitted += admitted - old_admitted
        self._schedule_charges[state.schedule_id] = (state.definition_bytes, nodes, charge,
                                                     admitted)
        return state

    def _commit_schedule(self, event: Event, out: Outcome) -> ScheduleState:
        if self.epoch is not None:  # Store v2: a (30,2) record on the schedule's chain
            self._commit_entity(event, out)
            return self.schedules.get(event["schedule_id"])
        sequence = self.next_sequence
        event = self._charge_history(event)  # an admission: may refuse, changing nothing
        state = self._apply_schedule(sequence, event)
        self.next_sequence += 1
        out.events.append((sequence, event))
        return state

    def _admit_schedule(self, event: Event) -> None:
        """Refuse a registration whose extra charge would exceed the state budget."""
        definition = dict(event["definition"])
        charge = schedule_charge(len(value.encode(definition)),
                                 measure(definition, "definition").nodes, len(event["active"]))
        previous = self._schedule_charges.get(event["schedule_id"])
        self.budget.admit(charge - (previous[2] if previous is not None else 0))

    # ---- requests -------------------------------------------------------------------

    def _schedule(self, cmd: Schedule, now_ms: int, mono_ms: int, out: Outcome) -> None:
        if not isinstance(cmd.body, dict):
            raise RequestRefused("schedule needs an object body", code="invalid_schedule")
        self._declaring_at = now_ms
        schedule_id, event = self.schedules.declare(cmd.body, now_ms, self.schedule_job_state)
        if event is not None:
            self._admit_schedule(event)
            self._commit_schedule(event, out)
        self._reply(out, cmd.conn, cmd.request_id, "scheduled", schedule_id=schedule_id,
                    schedule=self.schedules.status(schedule_id, self.schedule_job_state))

    def _cancel_schedule(self, cmd: CancelSchedule, now_ms: int, mono_ms: int,
                         out: Outcome) -> None:
        body = request_fields(cmd.body, frozenset({"schedule_id"}), "cancel_schedule")
        schedule_id = body.get("schedule_id")
        event = self.schedules.cancel(schedule_id, now_ms)
        if event is not None:
            self._commit_schedule(event, out)
        self._reply(out, cmd.conn, cmd.request_id, "schedule_cancelled", schedule_id=schedule_id,
                    schedule=self.schedules.status(schedule_id, self.schedule_job_state))

    def _schedule_status(self, cmd: ScheduleStatus, now_ms: int, mono_ms: int,
                         out: Outcome) -> None:
        body = request_fields(cmd.body, frozenset({"schedule_id"}), "schedule_status")
        schedule = self.schedules.status(body.get("schedule_id"), self.schedule_job_state)
        self._reply(out, cmd.conn, cmd.request_id, "schedule_status", schedule=schedule)

    def _list_schedules(self, cmd: ListSchedules, now_ms: int, mono_ms: int,
                        out: Outcome) -> None:
        body = request_fields(cmd.body, frozenset({"limit", "cursor"}), "schedules")
        objects, next_cursor = self.schedules.page(body.get("limit"), body.get("cursor"),
                                                   self.schedule_job_state)
        objects, next_cursor = self._fit_page(objects, next_cursor, cmd.request_id)
        self._reply(out, cmd.conn, cmd.request_id, "schedules", schedules=objects,
                    next_cursor=next_cursor)

    def _fit_page(self, objects: list[dict[str, Any]], next_cursor: str | None,
                  request_id: str | None) -> tuple[list[dict[str, Any]], str | None]:
        """Shorten a page to the reply limit; refuse (no partial list) if one object is too big."""
        budget = self.config.max_reply_bytes - PAGE_ENVELOPE_BYTES - _json_size(request_id)
        used = 0
        for index, obj in enumerate(objects):
            used += _json_size(obj) + 1  # the separating comma
            if used > budget:
                if index == 0:
                    raise RequestRefused(
                        f"schedule {obj['id']!r} does not fit a {self.config.max_reply_bytes}-byte "
                        "reply", code="response_too_large", schedule_id=obj["id"])
                return objects[:index], objects[index - 1]["id"]
        return objects, next_cursor

    # ---- delivery (called by tick) ----------------------------------------------------

    def _deliver_schedules(self, now_ms: int, out: Outcome) -> None:
        """Admit due occurrences and write skip advances, until nothing is due (bounded)."""
        delivered = 0
        while delivered < DELIVERIES_PER_TICK:
            work = self.schedules.due_work(now_ms, self.schedule_job_state)
            if not work:
                return
            for item in work[:DELIVERIES_PER_TICK - delivered]:
                if isinstance(item, Occurrence):
                    self._deliver_occurrence(item, now_ms, out)
                    continue
                try:
                    self._commit_schedule(item, out)
                except RequestRefused:  # history caps: the skip advance waits a second
                    self.schedules.admission_failed(item["schedule_id"], now_ms)
            delivered += len(work)

    def _deliver_occurrence(self, occurrence: Occurrence, now_ms: int, out: Outcome) -> None:
        """Insert the occurrence's job (unless it exists), then record the delivery."""
        try:
            inserted = request = None
            if occurrence.job_id not in self.jobs \
                    and occurrence.job_id not in self._finished_ids:
                options = {**occurrence.options, "id": occurrence.job_id.hex()}
                request = parse_enqueue(occurrence.task, dict(occurrence.args), options, now_ms,
                                        self.config, self.rng)
                self.budget.admit(job_charge(request.definition_size, request.definition_nodes))
                inserted = ev.job_inserted(request.job_id, now_ms, request.definition)
            # The delivery names the occurrence's job whatever its state, so it can be built
            # first: the insert and the delivery pass the history caps together or not at all.
            delivery = self.schedules.delivered(occurrence, now_ms, self.schedule_job_state)
            durable = inserted is not None and request.durability != "volatile"
            self._history_check([inserted, delivery] if durable else [delivery])
        except RequestRefused:
            # Capacity (state budget or history caps; nothing changed) or a relative option
            # now past the largest time: the same occurrence, with the same job id, is tried
            # again in a second.
            self.schedules.admission_failed(occurrence.schedule_id, now_ms)
            return
        if inserted is not None:
            self._commit(None, inserted, request.durability == "volatile", out,
                         nodes=request.definition_nodes)
        self._commit_schedule(delivery, out)

    _SCHEDULE_HANDLERS = {
        Schedule: _schedule,
        CancelSchedule: _cancel_schedule,
        ListSchedules: _list_schedules,
        ScheduleStatus: _schedule_status,
    }
