"""A hostile HTTP server on loopback: it answers every request with bytes a test scripts, whatever
HTTP says (a status line that is not HTTP's, too many headers, broken chunking, a cut-short body,
a byte at a time with pauses, redirects anywhere). What kbopt's HTTP client must survive."""
from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

# (bytes to send, seconds to wait before sending them)
Piece = tuple[bytes, float]
Script = Callable[[bytes], list[Piece]]


@dataclass
class HostileServer:
    """`script(request) -> [(bytes, delay)]`, sent in order, then the connection is closed."""
    script: Script
    requests: list[bytes] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.stopped = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5)
            try:
                request = _read_request(conn)
                self.requests.append(request)
                for data, delay in self.script(request):
                    if delay and self.stopped.wait(delay):
                        return
                    conn.sendall(data)
            except OSError:            # the client gave up (its deadline): nothing to say
                pass

    def close(self) -> None:
        self.stopped.set()
        self.listener.close()


def _read_request(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        piece = conn.recv(65536)
        if not piece:
            return data
        data += piece
    head, _, body = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    while len(body) < length:
        piece = conn.recv(65536)
        if not piece:
            break
        body += piece
    return head + b"\r\n\r\n" + body


def answer(status: bytes = b"HTTP/1.1 200 OK", headers: list[bytes] | None = None, body: bytes = b"",
           length: bool = True) -> bytes:
    """An HTTP answer as bytes; `headers` as written; a Content-Length unless `length` is false."""
    lines = [status, *(headers or [b"Content-Type: application/json"])]
    if length:
        lines.append(b"Content-Length: %d" % len(body))
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def vector(rows: list[tuple[dict[str, object], object]], **extra: object) -> bytes:
    """A Prometheus instant vector as JSON bytes: rows of (labels, value as Prometheus writes it)."""
    return json.dumps({"status": "success", **extra, "data": {
        "resultType": "vector", "result": [{"metric": m, "value": [0, v]} for m, v in rows]}}).encode()


def one_replica(request: bytes) -> bytes:
    """A vector with one vLLM replica for the running-requests query, empty for the others."""
    if b"num_requests_running" in request:
        return vector([({"instance": "10.0.0.1:8000", "model_name": "m"}, "3")])
    return vector([])


def trickled(data: bytes, every: float) -> list[Piece]:
    return [(data[i:i + 1], every) for i in range(len(data))]


def elapsed(since: float) -> float:
    return time.monotonic() - since
