"""Length-prefixed frames: a 4-byte big-endian payload length, then the payload.

``FrameDecoder`` is sans-IO: feed it whatever bytes arrived and take back complete payloads.
The length is checked before any payload byte is kept for decoding, and the unread buffer
is capped (``ProtocolLimits.buffer_limit``) so a peer cannot grow server memory at will.
"""

from __future__ import annotations

import struct
from typing import Any

from tay import _native
from tay.failures import ConnectionFatal

_LENGTH = struct.Struct(">I")


class FrameDecoder:
    """Reassembles frames from a byte stream.

    ``feed`` returns the complete payloads that precede any stream error; the error itself
    is left in ``fatal`` (the connection must then send it and close).
    """

    __slots__ = ("_buffer", "_max_frame", "_buffer_limit", "fatal", "_split", "_payloads")

    def __init__(self, max_frame: int, buffer_limit: int | None = None,
                 domain: tuple[int, int, int] = (0, 0, 0)) -> None:
        self._buffer = bytearray()
        self._max_frame = max_frame
        self._buffer_limit = 2 * max_frame + 8 if buffer_limit is None else buffer_limit
        self.fatal: ConnectionFatal | None = None
        # split_frames_marked with its limits set once: the frame size, then the domain's
        # clean marks (max_depth, max_nodes, max_key_bytes)
        scan = _native.FrameScan(max_frame, *domain)
        self._split, self._payloads = scan.split, scan.payloads

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    @property
    def unread(self) -> bytearray:
        """The unread bytes; always this one object (it is only ever changed in place)."""
        return self._buffer

    def feed(self, data: bytes) -> list[tuple[bytes, int, Any]]:
        """Append ``data`` and return every complete payload (in order) before any error,
        each with its mark and, for a report, its ids (one native call per buffer;
        ``tay._native.split_frames_marked``): 0, check it the exact way; 1, if it is valid
        JSON it is an object within the ``domain`` bounds given at construction for sure;
        2 or 3, a ``started`` / ``succeeded`` report (null or no result) written so plainly
        that it was read already: ids is (request_id, reservation_id, execution_id); 4, a
        clean ``enqueue`` whose top level was read already: ids is (request_id, task, args,
        options, plain), args and options their JSON text (options None when absent), plain
        the options read already when they are plain, else None."""
        if self.fatal is not None:
            return []
        if self._buffer:  # a partial frame waits: complete it in the unread buffer
            buffer = self._buffer
            buffer += data
            slices, consumed, error = self._split(buffer)
            frames = [(bytes(buffer[start:end]), mark, ids) for start, end, mark, ids in slices]
            self._consume(consumed, error)
            return frames
        # the common case: whole frames read straight from data, built by the scan itself
        buffer = data if type(data) is bytes else bytes(data)
        frames, consumed, error = self._payloads(buffer)
        if consumed == len(buffer) and error is None:
            return frames
        self.keep(buffer, consumed, error)
        return frames

    @property
    def whole(self) -> Any:
        """``feed``'s common case as the scan itself, for a caller that saves the call:
        while nothing is unread (and no error was met), ``whole(data)`` on bytes gives
        ``(frames, consumed, error)``; unless all of data was consumed without an error,
        ``keep(data, consumed, error)`` must follow. Together they are ``feed(data)``."""
        return self._payloads

    def keep(self, data: bytes | bytearray, consumed: int, error: str | None) -> None:
        """After ``whole(data)``: keep the partial frame (or the bad prefix) and the error."""
        self._buffer += data[consumed:]
        self._consume(0, error)

    def _consume(self, consumed: int, error: str | None) -> None:
        buffer = self._buffer
        if consumed:
            del buffer[:consumed]
        if error is not None:
            self.fatal = _frame_error(error, buffer, self._max_frame)
        elif len(buffer) > self._buffer_limit:
            self.fatal = ConnectionFatal(
                f"unread buffer of {len(buffer)} bytes exceeds {self._buffer_limit}",
                code="buffer_limit",
            )


def _frame_error(error: str, rest: bytearray, max_frame: int) -> ConnectionFatal:
    """Map ``split_frames``' error names to the connection-fatal wire codes."""
    if error == "frame_too_large":
        (length,) = _LENGTH.unpack_from(rest)
        return ConnectionFatal(f"frame length {length} exceeds the limit {max_frame}",
                               code="frame_too_large")
    if error == "empty_frame":
        return ConnectionFatal("zero-length frame", code="invalid_frame")
    return ConnectionFatal(f"bad frame: {error}", code="invalid_frame")


def encode_frame(payload: bytes) -> bytes:
    """Prefix an already encoded payload with its length."""
    return _LENGTH.pack(len(payload)) + payload
