"""The one HTTP client every network read of kbopt goes through (`collect --metrics URL`,
`kbopt fleet`). The servers it reads are untrusted, so:

- one deadline covers the whole exchange (connecting, sending, the status line, the headers and
  the body, redirects included): every read of the socket waits at most for what is left of it,
  so a server that trickles a byte every half second is cut off at the deadline like one that
  says nothing;
- the body is capped (MAX_BODY);
- a redirect is followed only within the origin asked for (same scheme, host and port), at most
  MAX_REDIRECTS times; one elsewhere, or to another scheme, is refused;
- every failure of the socket, TLS or HTTP's framing (a cut-short body, a status line that is not
  HTTP's, too many or too long header lines, broken chunked encoding) is one `HttpProblem` whose
  text says what happened and whether trying again may help. Nothing else escapes.

Built on http.client, not urllib.request: urllib follows redirects to any host and scheme, and
both read with a timeout per socket operation, never over the whole answer. What the
deadline does not bound: resolving the host's name (the system resolver has its own timeout).
The environment's proxy settings (HTTP_PROXY, which urllib read) are not used: the
address given is the server read.
"""
from __future__ import annotations

import functools
import http.client
import io
import socket
import time
import urllib.parse
from dataclasses import dataclass

MAX_BODY = 256 * 2 ** 20          # bytes of one answer: a 3,000-replica fleet's largest is a few tens of MB
MAX_REDIRECTS = 5
_REDIRECTS = frozenset({301, 302, 303, 307, 308})


@dataclass(frozen=True)
class Answer:
    url: str              # the URL that answered, after redirects
    status: int
    reason: str
    body: bytes


class HttpProblem(Exception):
    """No usable answer: `str()` says why in words; `retry` whether another try may get one
    (a refused or reset connection, a cut-short answer), or not (the deadline passed, the answer
    is not HTTP, a redirect off the origin, an answer over the cap)."""

    def __init__(self, text: str, retry: bool = False):
        super().__init__(text)
        self.retry = retry


def check_url(url: str) -> str | None:
    """Why `url` cannot be read (not http(s), no host, a port that is not a number), or None."""
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port                                   # noqa: B018  (raises on a port that is not a number)
    except ValueError as error:
        return f"not a URL ({error})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "not an http(s) URL with a host"
    if any(c in url for c in "\r\n\t ") or any(ord(c) < 0x20 or ord(c) == 0x7f for c in url):
        return "holds spaces or control characters"
    return None


def _origin(url: str) -> tuple[str, str, int]:
    parts = urllib.parse.urlsplit(url)
    return parts.scheme, (parts.hostname or "").lower(), parts.port or (443 if parts.scheme == "https" else 80)


def exchange(url: str, timeout_s: float, data: bytes | None = None, headers: dict[str, str] | None = None,
             max_body: int | None = None) -> Answer:
    """GET `url` (POST `data` when given) and read the whole answer within `timeout_s` seconds:
    an Answer whatever its status (the caller judges a 4xx or 5xx), or HttpProblem."""
    max_body = MAX_BODY if max_body is None else max_body
    problem = check_url(url)
    if problem:
        raise HttpProblem(problem)
    deadline = time.monotonic() + timeout_s
    start = _origin(url)
    method = "POST" if data is not None else "GET"
    for _ in range(MAX_REDIRECTS + 1):
        answer, location = _once(url, method, data, headers or {}, deadline, timeout_s, max_body)
        if answer.status not in _REDIRECTS:
            return answer
        if not location:
            raise HttpProblem(f"HTTP {answer.status} redirect without a Location")
        try:
            target = urllib.parse.urljoin(url, location)
        except ValueError as error:          # `http://[::1` (an IPv6 host left open) and the like
            raise HttpProblem(f"HTTP {answer.status} redirect to {location[:200]!r}, which is not a URL ({error})") from None
        if check_url(target) is not None or _origin(target) != start:
            raise HttpProblem(f"redirects to {target[:200]!r}, off the address given (only redirects within "
                              "its scheme, host and port are followed): give that address itself if it is meant")
        if answer.status == 303 or (answer.status in (301, 302) and method == "POST"):
            # As browsers and urllib do; a form POST's fields go into the query string, which
            # Prometheus' API reads the same way.
            if data:
                target += ("&" if urllib.parse.urlsplit(target).query else "?") + data.decode("ascii", "replace")
            method, data = "GET", None
        url = target
    raise HttpProblem(f"more than {MAX_REDIRECTS} redirects")


def _once(url: str, method: str, data: bytes | None, headers: dict[str, str], deadline: float, timeout_s: float,
          max_body: int) -> tuple[Answer, str | None]:
    parts = urllib.parse.urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    left = deadline - time.monotonic()
    if left <= 0:
        raise HttpProblem(f"no answer within {timeout_s:g} s (--timeout)")
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    connection = kind(parts.hostname or "", parts.port, timeout=left)
    connection.response_class = functools.partial(_DeadlineResponse, deadline=deadline)  # type: ignore[assignment]
    try:
        connection.request(method, target, body=data, headers=headers)
        response = connection.getresponse()
        if response.status not in _REDIRECTS:
            declared = response.length
            if declared is not None and declared > max_body:
                raise HttpProblem(f"the answer is {declared:,} bytes, more than kbopt reads ({max_body:,})")
            body = _body(response, max_body)
        else:
            body = b""
        return Answer(url, response.status, response.reason, body), response.getheader("Location")
    except HttpProblem:
        raise
    except TimeoutError:
        raise HttpProblem(f"no answer within {timeout_s:g} s (--timeout)") from None
    except http.client.IncompleteRead as error:
        # http.client says the same of a chunk size that is not hexadecimal.
        raise HttpProblem(f"the answer was cut short, or its chunked encoding broken, after {len(error.partial):,} "
                          "bytes of its body", retry=True) from None
    except http.client.RemoteDisconnected:
        raise HttpProblem("it closed the connection without answering", retry=True) from None
    except http.client.LineTooLong as error:
        raise HttpProblem(f"a malformed HTTP answer: an over-long line ({error})") from None
    except http.client.BadStatusLine as error:
        raise HttpProblem(f"the answer is not HTTP: its status line reads {str(error)[:80]!r}") from None
    except http.client.HTTPException as error:
        raise HttpProblem(f"a malformed HTTP answer: {type(error).__name__} {str(error)[:200]}") from None
    except ValueError as error:          # a chunk size that is not hexadecimal, a header http.client cannot read
        raise HttpProblem(f"a malformed HTTP answer: {str(error)[:200]}") from None
    except OSError as error:             # refused, reset, unreachable, a name that does not resolve, TLS
        raise HttpProblem(f"cannot reach it: {error.strerror or error}", retry=True) from None
    finally:
        connection.close()


def _body(response: http.client.HTTPResponse, max_body: int) -> bytes:
    """The whole body, or HttpProblem past `max_body` bytes or when it stops short of its
    Content-Length (http.client's read(amt) would return what came, silently)."""
    pieces, size = [], 0
    while True:
        piece = response.read(min(65536, max_body + 1 - size))
        if not piece:
            break
        pieces.append(piece)
        size += len(piece)
        if size > max_body:
            raise HttpProblem(f"the answer is more than {max_body:,} bytes, more than kbopt reads")
    if response.length:                  # bytes its Content-Length promised and the server did not send
        raise http.client.IncompleteRead(b"".join(pieces), response.length)
    return b"".join(pieces)


class _DeadlineReader(io.RawIOBase):
    """The socket's reader as http.client reads it, each read waiting at most until the deadline."""

    def __init__(self, raw: io.RawIOBase, sock: socket.socket, deadline: float):
        self.raw, self.sock, self.deadline = raw, sock, deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int | None:   # type: ignore[override]
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("past the deadline")
        self.sock.settimeout(left)
        return self.raw.readinto(buffer)

    def close(self) -> None:
        self.raw.close()
        super().close()


class _DeadlineResponse(http.client.HTTPResponse):
    def __init__(self, sock: socket.socket, debuglevel: int = 0, method: str | None = None, url: str | None = None, *,
                 deadline: float):
        super().__init__(sock, debuglevel, method, url)
        # The socket's own reader (makefile's, which keeps the socket open while the response is
        # read), taken out of its buffer, with the deadline's in between.
        raw = self.fp.detach()
        self.fp = io.BufferedReader(_DeadlineReader(raw, sock, deadline))
