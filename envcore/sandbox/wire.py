"""Frames on a socket: how the grader, the zygote and the workers talk.

A frame is an 8-byte header (JSON length, blob length; big-endian u32 each), a JSON object, and an
optional binary blob (a response body, so a megabyte of body is not base64-inflated). The reading
side always states the largest frame it accepts and a deadline: a worker is untrusted, so a frame
that is too big, malformed, or too slow to arrive is an error on *its* side, never a hang or an
out-of-memory on ours. Nothing here unpickles: the parent never runs a deserialiser that could be
turned into code execution by what a worker sends.
"""

from __future__ import annotations

import json
import os
import select
import socket
import struct
import time
from typing import Any

HEADER = struct.Struct("!II")
MAX_JSON_BYTES = 64 * 1024 * 1024
"""What the parent accepts by default; callers reading from a worker pass far smaller limits."""


class WireError(Exception):
    """The other side broke the protocol: closed early, sent garbage, too much, or too slowly."""


class PeerClosed(WireError):
    """The other side closed the connection (usually: the process died)."""


class WireTimeout(WireError):
    """No complete frame arrived before the deadline."""


def encode(message: dict[str, Any], blob: bytes = b"") -> bytes:
    data = json.dumps(message, separators=(",", ":")).encode()
    return HEADER.pack(len(data), len(blob)) + data + blob


def send_frame(sock: socket.socket, message: dict[str, Any], blob: bytes = b"", fds: list[int] | None = None) -> None:
    """Send one frame; ``fds`` travel as SCM_RIGHTS with the first byte (unix sockets only)."""
    data = encode(message, blob)
    if fds:
        sent = socket.send_fds(sock, [data[:1]], fds)
        data = data[sent:]
    sock.sendall(data)


class FrameReader:
    """Reads whole frames from a blocking socket, with a deadline and size limits per frame."""

    def __init__(self, sock: socket.socket, *, collect_fds: bool = False) -> None:
        self.sock = sock
        self.buffer = bytearray()
        self.collect_fds = collect_fds
        self.fds: list[int] = []
        """Descriptors received (SCM_RIGHTS) so far, in order, when ``collect_fds`` is set."""

    def _fill(self, need: int, deadline: float | None) -> None:
        while len(self.buffer) < need:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise WireTimeout("timed out waiting for a frame")
                ready, _, _ = select.select([self.sock], [], [], left)
                if not ready:
                    raise WireTimeout("timed out waiting for a frame")
            try:
                if self.collect_fds:
                    chunk, fds, _, _ = socket.recv_fds(self.sock, max(65536, need - len(self.buffer)), 16)
                    self.fds += fds
                else:
                    chunk = self.sock.recv(max(65536, need - len(self.buffer)))
            except (ConnectionResetError, BrokenPipeError) as exc:
                raise PeerClosed(str(exc)) from None
            if not chunk:
                raise PeerClosed("connection closed")
            self.buffer += chunk

    def read(
        self,
        deadline: float | None = None,
        *,
        max_json: int = MAX_JSON_BYTES,
        max_blob: int = MAX_JSON_BYTES,
    ) -> tuple[dict[str, Any], bytes]:
        """The next frame as (message, blob); :class:`WireError` on anything else."""
        self._fill(HEADER.size, deadline)
        json_len, blob_len = HEADER.unpack_from(self.buffer)
        if json_len > max_json or blob_len > max_blob:
            raise WireError(f"frame too large ({json_len} + {blob_len} bytes)")
        total = HEADER.size + json_len + blob_len
        self._fill(total, deadline)
        raw = bytes(self.buffer[HEADER.size : HEADER.size + json_len])
        blob = bytes(self.buffer[HEADER.size + json_len : total])
        del self.buffer[:total]
        try:
            message = json.loads(raw)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise WireError(f"malformed frame: {type(exc).__name__}") from None
        if not isinstance(message, dict):
            raise WireError("malformed frame: not an object")
        return message, blob


def exchange(sock: socket.socket, reader: "FrameReader", message: dict[str, Any], timeout_s: float, *,
             fds: list[int] | None = None, blob: bytes = b"") -> dict[str, Any]:
    """Send a command (carrying an ``id``) and read the reply to it: the parent's side of the zygote
    and template protocol. :class:`WireError` if the reply is to another command."""
    send_frame(sock, message, blob, fds=fds)
    reply, _ = reader.read(time.monotonic() + timeout_s)
    if reply.get("id") != message.get("id"):
        raise WireError("the process answered out of turn")
    return reply


def read_exact_fd(fd: int, n: int) -> bytes:
    """Blocking read of exactly ``n`` bytes from a raw fd (worker side; no deadline needed there)."""
    parts = []
    while n:
        chunk = os.read(fd, n)
        if not chunk:
            raise PeerClosed("connection closed")
        parts.append(chunk)
        n -= len(chunk)
    return b"".join(parts)


def read_frame_fd(fd: int) -> tuple[dict[str, Any], bytes]:
    """Worker side: the next frame from the parent (trusted), read with plain ``os.read``."""
    json_len, blob_len = HEADER.unpack(read_exact_fd(fd, HEADER.size))
    message = json.loads(read_exact_fd(fd, json_len)) if json_len else {}
    return message, read_exact_fd(fd, blob_len) if blob_len else b""


def write_all_fd(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
