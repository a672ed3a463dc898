"""A fault-injecting HTTP proxy for an S3 endpoint on loopback: the faults a real network and a busy
object store produce, on a seeded fraction of requests, so reliability tests are repeatable.

Faults (``FAULTS``), each chosen for a request with its own probability:

* ``error``: 500 InternalError or 503 SlowDown, without forwarding (the store did nothing);
* ``reset``: the connection is closed before forwarding (the store did nothing);
* ``cut``: forwarded; the reply's headers and its body up to a random offset are sent, then the
  connection is closed (a reset inside a body: the store did the work, the client got part of it);
  a reply without a body (a PUT's, a HEAD's) is cut inside its headers instead;
* ``cut_headers``: forwarded; the reply is cut at a random offset inside its status line and headers
  (urllib3 only logs the broken headers: the client sees a reply with some headers missing), any method;
* ``lost``: forwarded, and then the connection is closed without a reply (the store did the work,
  a PUT included: the client does not know);
* ``delay``: forwarded after a pause.

``counts`` says how many of each were injected. ``pause()`` lets everything through (a test's own
checks must not be faulted).
"""

from __future__ import annotations

import http.client
import random
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

FAULTS = ("error", "reset", "cut", "cut_headers", "lost", "delay")
_ERROR_BODY = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>injected by the fault '
               b"proxy</Message></Error>")


@dataclass
class FaultPlan:
    rate: float = 0.2
    """The share of requests that get a fault."""
    kinds: tuple[str, ...] = FAULTS
    seed: int = 0
    delay_s: float = 0.2
    only_methods: tuple[str, ...] = ()
    """Fault only these methods (``("PUT",)``); empty: every method."""
    only_paths: tuple[str, ...] = ()
    """Fault only requests whose path contains one of these (``("_PUBLISHED.json",)``); empty: all."""
    limit: int | None = None
    """At most this many faults (``1``: the first matching request only, with ``rate=1``)."""

    def __post_init__(self) -> None:
        if not 0 <= self.rate <= 1:
            raise ValueError(f"rate must be in [0, 1], got {self.rate}")
        unknown = set(self.kinds) - set(FAULTS)
        if unknown:
            raise ValueError(f"unknown fault kinds {sorted(unknown)}; known: {FAULTS}")


@dataclass
class FaultProxy:
    upstream: str
    plan: FaultPlan
    counts: Counter = field(default_factory=Counter)
    requests: int = 0
    endpoint_url: str = ""
    _paused: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.plan.seed)

    def choose(self, method: str, path: str) -> str | None:
        with self._lock:
            self.requests += 1
            if self._paused:
                return None
            if self.plan.only_methods and method not in self.plan.only_methods:
                return None
            if self.plan.only_paths and not any(p in path for p in self.plan.only_paths):
                return None
            if self.plan.limit is not None and self.injected >= self.plan.limit:
                return None
            if self._rng.random() >= self.plan.rate:
                return None
            kind = self._rng.choice(self.plan.kinds) if self.plan.kinds else None
            if kind is None:
                return None
            self.counts[kind] += 1
            return kind

    def offset(self, lo: int, hi: int) -> int:
        """Where a reply is cut: seeded, so a run's faults repeat."""
        with self._lock:
            return self._rng.randint(lo, max(lo, hi))

    @contextmanager
    def pause(self) -> Iterator[None]:
        self._paused = True
        try:
            yield
        finally:
            self._paused = False

    @property
    def injected(self) -> int:
        return sum(self.counts.values())


def _handler(proxy: FaultProxy) -> type[BaseHTTPRequestHandler]:
    up = urlparse(proxy.upstream)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # quiet: tests print the summary
            pass

        def _body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                chunks = []
                while (size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)) > 0:
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
                self.rfile.readline()  # the empty trailer
                return b"".join(chunks)
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def _forward(self, body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes]:
            headers = {k: v for k, v in self.headers.items()
                       if k.lower() not in ("transfer-encoding", "connection", "expect")}
            headers["Content-Length"] = str(len(body))
            conn = http.client.HTTPConnection(up.hostname, up.port, timeout=60)
            try:
                conn.request(self.command, self.path, body=body, headers=headers)
                reply = conn.getresponse()
                return reply.status, reply.reason, reply.getheaders(), reply.read()
            finally:
                conn.close()

        def _send(self, status: int, reason: str, headers: list[tuple[str, str]], body: bytes,
                  cut: str | None = None) -> None:
            lines = [f"HTTP/1.1 {status} {reason}"]
            for k, v in headers:
                if k.lower() not in ("transfer-encoding", "connection", "content-length", "server", "date"):
                    lines.append(f"{k}: {v}")
            # A HEAD reply has no body but the object's length.
            length = dict((k.lower(), v) for k, v in headers).get("content-length") if self.command == "HEAD" else None
            lines.append(f"Content-Length: {length or len(body)}")
            head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
            payload = b"" if self.command == "HEAD" else body
            if cut == "cut" and len(payload) > 1:  # inside the body, anywhere
                reply = head + payload[: proxy.offset(1, len(payload) - 1)]
            elif cut:  # inside the status line and headers, anywhere (a body-less reply has only those to cut)
                reply = head[: proxy.offset(1, len(head) - 3)]
            else:
                reply = head + payload
            self.wfile.write(reply)
            self.wfile.flush()
            if cut:
                self.close_connection = True

        def _handle(self) -> None:
            body = self._body()
            kind = proxy.choose(self.command, self.path)
            if kind == "reset":
                self.close_connection = True
                return
            if kind == "error":
                code, reason = proxy._rng.choice([(500, b"InternalError"), (503, b"SlowDown")])
                self._send(code, reason.decode(), [("Content-Type", "application/xml")], _ERROR_BODY % reason)
                return
            if kind == "delay":
                time.sleep(proxy.plan.delay_s)
            status, reason, headers, payload = self._forward(body)
            if kind == "lost":
                self.close_connection = True
                return
            self._send(status, reason, headers, payload, cut=kind if kind in ("cut", "cut_headers") else None)

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

    return Handler


@contextmanager
def fault_proxy(upstream: str, plan: FaultPlan) -> Iterator[FaultProxy]:
    """Serve ``upstream`` through a fault-injecting proxy on a free loopback port."""
    proxy = FaultProxy(upstream, plan)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(proxy))
    server.daemon_threads = True
    proxy.endpoint_url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, name="fault-proxy", daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        server.shutdown()
        server.server_close()
