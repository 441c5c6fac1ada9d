"""Producer requests: enqueue, status, result and cancel (protocol.md §1.4, §2, §6.7-6.8).

Each handler validates everything before it mutates anything, so a ``RequestRefused``
raised here leaves the engine untouched (``Engine.handle`` turns it into a ``Refuse``).
"""

from __future__ import annotations

import orjson

from tay.engine.admission import job_charge
from tay.engine.commands import Cancel, DecodedEnqueue, Enqueue, PlainEnqueue, Result, Status
from tay.engine.effects import CancelExecution, Outcome, Reply
from tay.engine.validation.ids import parse_job_id, random_token
from tay.engine.retained.jobs import JobEntry, canonical_order, peek, public_job, read_state
from tay.engine.validation.options import parse_enqueue, parse_plain_enqueue
from tay.engine.state import EngineState
from tay.failures import RequestRefused
from tay.storage import events as ev

_new_tuple = tuple.__new__  # a named tuple built without its Python-level __new__
_Fragment = orjson.Fragment  # JSON text spliced as it is into a reply

RESULT_REFUSALS = {
    "cancelled": ("task_cancelled", "the job was cancelled"),
    "discarded": ("task_failed", "the job failed on its last allowed attempt"),
}


class ProducerCommands(EngineState):
    def _reply(self, out: Outcome, conn, request_id, kind: str, **fields) -> None:
        if conn is not None or request_id is not None:
            out.effects.append(_new_tuple(Reply, (conn, request_id, kind, fields)))

    def _lookup(self, raw_job_id) -> JobEntry:
        job_id = parse_job_id(raw_job_id)
        entry = self._entry(job_id)
        if entry is None:
            raise RequestRefused(f"job {job_id.hex()} not found", code="not_found", job_id=job_id.hex())
        return entry

    def _enqueue(self, cmd: Enqueue, now_ms: int, mono_ms: int, out: Outcome) -> JobEntry:
        """Insert the job (or find the same one), reply ``enqueued``, dispatch; the entry
        for an operations caller (``run_schedule``)."""
        conn, request_id, task, args, options = cmd
        kind = type(cmd)
        job_id, definition, size, nodes, durability, args_json = request = \
            parse_plain_enqueue(task, args, options, now_ms, self.config, self.rng) \
            if kind is PlainEnqueue else parse_enqueue(task, args, options, now_ms,
                                                       self.config, self.rng,
                                                       kind is DecodedEnqueue)
        entry = self.jobs.get(job_id)
        if entry is None and job_id in self._finished_ids:
            entry = self._thaw(job_id)
        reply_args = None  # the stored args are decoded for the reply unless reusable
        if entry is not None:
            if (entry.durability != durability
                    or entry.state.definition_bytes != request.definition_bytes()):
                raise RequestRefused(
                    f"job {job_id.hex()} already exists with a different definition "
                    "(conflict)", code="invalid_enqueue", reason="conflict",
                    job_id=job_id.hex(),
                )
        else:
            charge = job_charge(size, nodes)  # size is len(definition.canonical)
            self.budget.admit(charge)
            volatile = durability == "volatile"
            entry = self._insert_fused(job_id, now_ms, definition, charge, out) \
                if not volatile and self.epoch is not None and self.fused else None
            if entry is None:  # the general path (tay.engine.epoch, "fused per-job commits")
                entry = self._commit(None, ev.job_inserted(job_id, now_ms, definition),
                                     volatile, out, nodes=nodes)
            # the frame's args text (a PlainEnqueue's bytes, handed on as they came) is
            # its own object of exactly its size: kept without a copy
            self.execute_args.remember(job_id, entry.state.definition, args_json,
                                       args_json is args)
            if type(args) is bytes:  # the args' sorted JSON text (a PlainEnqueue's)
                reply_args = _Fragment(args)
            elif canonical_order(args):  # the bytes just stored encode exactly these args
                reply_args = args
        if conn is not None or request_id is not None:  # _reply, inline
            out.effects.append(_new_tuple(Reply, (conn, request_id, "enqueued", {
                "job_id": job_id.hex(), "job": public_job(entry, reply_args)})))
        self._dispatch(now_ms, mono_ms, out)
        return entry

    def _status(self, cmd: Status, now_ms: int, mono_ms: int, out: Outcome) -> None:
        entry = self._lookup(cmd.job_id)
        self._reply(out, cmd.conn, cmd.request_id, "status", job=public_job(entry),
                    status=peek(entry).state)

    def _result(self, cmd: Result, now_ms: int, mono_ms: int, out: Outcome) -> None:
        entry = self._lookup(cmd.job_id)
        job = read_state(entry)
        if job.state == "completed":
            if not job.result_present:
                raise RequestRefused("the completed job has no retained result",
                                     code="result_missing", job_id=job.id.hex())
            self._reply(out, cmd.conn, cmd.request_id, "result", result=job.result)
            return
        code, message = RESULT_REFUSALS.get(job.state, ("result_not_ready", "the job is not finished"))
        details = {}
        if job.state == "discarded":  # what failed, for RemoteTaskError (docs/admin.md)
            details = {"failure": dict(job.failure) if job.failure is not None else None,
                       "diagnostic": dict(job.diagnostic) if job.diagnostic else None}
        raise RequestRefused(message, code=code, job_id=job.id.hex(), state=job.state, **details)

    def _cancel(self, cmd: Cancel, now_ms: int, mono_ms: int, out: Outcome) -> None:
        entry = self._lookup(cmd.job_id)
        self._cancel_unless_cancelled(entry, now_ms, out)
        self._reply(out, cmd.conn, cmd.request_id, "cancelled", job=public_job(entry),
                    status=entry.state.state)
        self._dispatch(now_ms, mono_ms, out)

    def _cancel_unless_cancelled(self, entry: JobEntry, now_ms: int, out: Outcome) -> None:
        """Cancel a job (a cancelled one stays as it is); finished ones are refused."""
        job = entry.state
        if job.state in ("completed", "discarded"):
            raise RequestRefused(f"a {job.state} job cannot be cancelled", code="cancel_rejected",
                                 job_id=job.id.hex(), state=job.state)
        if job.state != "cancelled":
            self._cancel_job(entry, now_ms, out)

    def _cancel_job(self, entry: JobEntry, now_ms: int, out: Outcome) -> None:
        """Cancel a cancellable job durably; a running execution is told to stop after."""
        job = entry.state
        token = job.execution if job.state == "executing" else None
        reservation = self.executors.reservations.get(entry.reservation_id or "")
        self._commit(entry, ev.job_cancelled(job.id, now_ms, job.revision, token),
                     entry.volatile, out)
        if reservation is not None:
            self._release(reservation)
            out.effects.append(CancelExecution(reservation.conn, random_token(self.rng),
                                               reservation.reservation_id,
                                               reservation.execution_id))
