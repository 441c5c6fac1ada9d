"""One Unix-socket connection, sans-IO: bytes in, typed requests and reply frames out.

The session owns everything whose lifetime is the connection: the frame decoder, the
handshake state and the count of forwarded requests still awaiting an answer. The server
feeds it bytes and performs what it returns; tests feed it literal bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from tay._frozen import Record
from tay.failures import ConnectionFatal, RequestRefused

from .envelope import check_envelope
from .framing import FrameDecoder
from .limits import ProtocolLimits
from .messages import (
    build_parsers, execution_ids, parse_enqueue, parse_failed, parse_hello, parse_succeeded,
)
from .replies import error_frame, reply_frame
from .requests import (
    FORWARDED, Enqueue, Failed, Hello, RegisterTasks, Request, Started, Succeeded, UnregisterTasks,
)
from .values import decode_message, encode_json

Output = Request | bytes  # a request to forward, or a frame to send as is
# what builds the started, succeeded and failed reports: (request_id, reservation_id,
# execution_id[, result | error]) -> the report
ReportMakers = tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any]]
# the started and succeeded report types when they are tuples, and the fields before the ids:
# (started_type, succeeded_type, head), see ProtocolSession
ReportTuples = tuple[type, type, tuple]
_new_tuple = tuple.__new__
_NO_RESULT = (None,)
_loads, _JSONDecodeError = orjson.loads, orjson.JSONDecodeError


class Received(Record):
    """What one ``receive`` call produced, in arrival order, and whether to close after."""

    __slots__ = ("outputs", "close_frame")
    outputs: list[Output]
    close_frame: bytes | None

    def __init__(self, outputs: list[Output] | None = None,
                 close_frame: bytes | None = None) -> None:
        self.outputs = [] if outputs is None else outputs  # a new list for each
        self.close_frame = close_frame


class ProtocolSession:
    """Protocol state of one connection.

    ``reports``: what builds the execution reports (``started``, ``succeeded``, ``failed``),
    the wire requests by default; ``enqueue``: what builds a forwarded enqueue from
    ``(request_id, task, args, options, size)``, ``Enqueue`` by default. The server passes
    constructors of its engine commands, so each per-job request is built once instead of
    as a frozen wire request and then as the command it maps to one to one.

    ``report_tuples``: ``(started_type, succeeded_type, head)`` when those reports are tuple
    types whose fields are ``head + (request_id, reservation_id, execution_id[, result])``
    (the server's engine commands, ``head`` the connection): a report the decoder read
    already is then made with ``tuple.__new__`` at once, without a maker call (two reports
    per job). It must build what ``reports`` builds.

    An enqueue whose top level the decoder read already (mark 4: version 1, plain request
    id and task, the args and options objects as JSON text) is built from its two decoded
    objects without the whole message's decode, the envelope check and the parse, with the
    same pending count; if either object is not valid JSON, neither is the payload, and
    it takes the exact path, which names the error. ``plain_enqueue``: what builds it
    instead when the decoder read its options too (``(request_id, task, args, (retries,
    queue, durability), size)``, see ``tay._native.split_frames_marked``); it must build
    what ``enqueue`` builds of the same options as an object, for the engine (the server
    passes the engine's ``PlainEnqueue``). Its args are the JSON text itself (bytes, not
    decoded) when the decoder found that orjson would write the decoded object back as
    exactly that text (``tay._native.json_canonical``)."""

    def __init__(self, limits: ProtocolLimits, reports: ReportMakers | None = None,
                 enqueue: Callable[..., Any] = Enqueue, *,
                 report_tuples: ReportTuples | None = None,
                 plain_enqueue: Callable[..., Any] | None = None) -> None:
        self.limits = limits
        self.hello: Hello | None = None
        self.pending = 0  # forwarded requests not yet answered
        self.failed = False
        self.decoder = FrameDecoder(limits.max_frame_bytes, limits.buffer_limit,
                                    (limits.max_depth, limits.max_nodes, limits.max_key_bytes))
        self._parsers = build_parsers(
            limits.max_tasks_per_message, limits.result_bytes, limits.error_bytes
        )
        self._make_enqueue = enqueue
        self._make_plain = plain_enqueue
        self._max_pending = limits.max_pending_requests
        started, succeeded, failed = reports or (Started, Succeeded, Failed)
        result_bytes, error_bytes = limits.result_bytes, limits.error_bytes
        # reports the decoder read for us (marks 2 and 3, see FrameDecoder.feed): what the
        # general route would build from them; a null result is refused by a result limit
        # under its 4 bytes, so then succeeded reports take the general route
        self._started = started
        self._succeeded = succeeded if result_bytes >= len(encode_json(None)) else None
        self._started_type = self._succeeded_type = None
        if report_tuples is not None:
            self._started_type, succeeded_type, self._report_head = report_tuples
            if self._succeeded is not None:
                self._succeeded_type = succeeded_type
        # the per-job requests after hello, (request_id, message, size) -> output: nothing
        # else of _dispatch applies to them
        self._shortcuts: dict[str, Callable[[str, dict[str, Any], int], Any]] = {
            "started": lambda rid, msg, size: started(rid, *execution_ids(msg)),
            "succeeded": lambda rid, msg, size: parse_succeeded(rid, msg, result_bytes,
                                                                succeeded),
            "failed": lambda rid, msg, size: parse_failed(rid, msg, error_bytes, failed),
            "enqueue": self._enqueue,
        }

    @property
    def decoder(self) -> Any:
        return self._decoder

    @decoder.setter
    def decoder(self, decoder: Any) -> None:
        """The frame decoder (tests may wrap it): a FrameDecoder's scan is called straight
        from receive_into while nothing is unread; any other decoder's feed on every read."""
        self._decoder = decoder
        self._whole = decoder.whole if type(decoder) is FrameDecoder else None
        self._unread_frame = decoder.unread if type(decoder) is FrameDecoder else None

    @property
    def buffered(self) -> int:
        return self._decoder.buffered

    @property
    def unread(self) -> bytearray:
        """The decoder's unread bytes (a partial frame): one object for the session's life,
        so the server can test it per read without a call."""
        return self._decoder.unread

    def receive(self, data: bytes) -> Received:
        """Process bytes from the peer. After a fatal error nothing more is accepted."""
        received = Received()
        received.close_frame = self.receive_into(data, received.outputs)
        return received

    def receive_into(self, data: bytes, outputs: list[Output]) -> bytes | None:
        """``receive`` without its result object (the server's path, once per read):
        append what ``data`` produced to ``outputs`` and return the close frame, if any."""
        if self.failed:
            return None
        hello = self.hello
        try:
            whole = self._whole  # FrameDecoder.feed's common case without its call
            if whole is not None and not self._unread_frame and type(data) is bytes:
                frames, consumed, error = whole(data)
                if consumed != len(data) or error is not None:
                    self._decoder.keep(data, consumed, error)
            else:
                frames = self._decoder.feed(data)
            for payload, mark, ids in frames:
                if mark > 1 and hello is not None:  # a report or an enqueue, read already
                    if mark == 4:  # request_id, task, args and options (JSON text), plain
                        # and whether the args text is what orjson writes back (canonical):
                        # then the engine takes it as the args' JSON, not decoded here
                        request_id, task, args, options, plain, canonical = ids
                        try:
                            if not canonical or self._make_plain is None:
                                args = _loads(args)
                            if plain is None or self._make_plain is None:
                                plain = None
                                options = {} if options is None else _loads(options)
                        except _JSONDecodeError:  # not valid JSON: the exact path names it
                            pass
                        else:  # what _enqueue makes of the decoded message
                            if self.pending < self._max_pending:
                                self.pending += 1
                                outputs.append(
                                    self._make_enqueue(request_id, task, args, options,
                                                       len(payload)) if plain is None else
                                    self._make_plain(request_id, task, args, plain,
                                                     len(payload)))
                                continue
                            try:
                                self._refuse_pending()
                            except RequestRefused as refused:
                                outputs.append(error_frame(refused, request_id))
                            continue
                    elif mark == 2:
                        kind = self._started_type
                        if kind is not None:
                            outputs.append(_new_tuple(kind, self._report_head + ids))
                        else:
                            outputs.append(self._started(*ids))
                        continue
                    else:
                        kind = self._succeeded_type
                        if kind is not None:
                            outputs.append(_new_tuple(kind,
                                                      self._report_head + ids + _NO_RESULT))
                            continue
                        if self._succeeded is not None:
                            outputs.append(self._succeeded(*ids, None))
                            continue
                message = None
                if mark:  # within the value domain if it is a JSON object: orjson decides
                    try:
                        message = orjson.loads(payload)
                    except orjson.JSONDecodeError:
                        pass
                if type(message) is not dict:  # the exact check, which names any error
                    message = decode_message(payload, self.limits)
                message_type, request_id = check_envelope(message)
                try:
                    shortcut = self._shortcuts.get(message_type)
                    if shortcut is not None and hello is not None:
                        outputs.append(shortcut(request_id, message, len(payload)))
                    else:
                        outputs.append(self._dispatch(message_type, request_id, message,
                                                      len(payload)))
                        hello = self.hello  # a hello in this buffer counts for the next
                except RequestRefused as refused:
                    outputs.append(error_frame(refused, request_id))
            if self._decoder.fatal is not None:
                raise self._decoder.fatal
        except ConnectionFatal as fatal:
            self.failed = True
            return error_frame(fatal)
        return None

    def settle(self) -> None:
        """A forwarded request was answered (or failed): free its pending slot."""
        self.pending -= 1

    def _dispatch(self, message_type: str, request_id: str, message: dict[str, Any],
                  size: int) -> Output:
        if message_type == "hello":
            if self.hello is not None:
                raise RequestRefused("hello was already accepted", code="already_hello")
            self.hello = parse_hello(request_id, message)
            return self.hello
        if message_type == "heartbeat":
            return reply_frame("heartbeat_ok", request_id)
        if message_type == "pong":
            return reply_frame("accepted", request_id)
        if message_type == "ping":
            return reply_frame("pong", request_id, ping_id=message.get("ping_id", request_id))
        if self.hello is None:
            raise RequestRefused("the first request must be hello", code="hello_required")
        if message_type == "register_schedules":
            raise RequestRefused("bulk schedule registration is not supported",
                                 code="bulk_scheduling_unsupported")
        if message_type == "enqueue":
            return self._enqueue(request_id, message, size)
        request = self._parsers[message_type](request_id, message)
        if isinstance(request, (RegisterTasks, UnregisterTasks)) and self.hello.mode == "client":
            raise RequestRefused("a client-mode connection cannot execute tasks",
                                 code="client_cannot_execute")
        if isinstance(request, FORWARDED):
            return self._count_pending(request)
        return request

    def _enqueue(self, request_id: str, message: dict[str, Any], size: int) -> Any:
        request = parse_enqueue(request_id, message, size, self._make_enqueue)
        if self.pending >= self._max_pending:  # _count_pending, inline (one per job)
            self._refuse_pending()
        self.pending += 1
        return request

    def _count_pending(self, request: Any) -> Any:
        """A forwarded request takes a pending slot, or is refused when none is left."""
        if self.pending >= self._max_pending:
            self._refuse_pending()
        self.pending += 1
        return request

    def _refuse_pending(self) -> None:
        raise RequestRefused(f"more than {self._max_pending} requests pending",
                             code="too_many_requests")
