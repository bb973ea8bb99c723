"""A fault-injecting proxy between icegroup and a REST catalog: a commit lands on the server, its answer never comes.

Every request is passed on to the server as it came. An armed ``Fault`` picks one request (its
method, a pattern on its path and one on its body), lets the server answer it, and then, instead of
relaying that answer, either drops the connection (the client sees it reset with no response) or
answers 503 (a gateway that gave up). So the commit happened, and the client cannot know it. Each
fault fires once. ``seen`` keeps every request's method, path, status and the start of its body.
"""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import requests

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding", "host"}
UNAVAILABLE = b'{"error": {"message": "upstream gave no answer", "type": "ServiceUnavailableException", "code": 503}}'


@dataclass
class Fault:
    """One answer to lose: ``drop`` closes the connection, ``503`` answers Service Unavailable; after the server's."""

    name: str
    path: str
    body: str = ""
    after: str = "drop"
    method: str = "POST"
    fired: list[str] = field(default_factory=list)

    def matches(self, method: str, path: str, body: bytes) -> bool:
        """Whether this is the request to lose the answer of (and the fault has not fired yet)."""
        return (
            not self.fired
            and method == self.method
            and re.search(self.path, path) is not None
            and re.search(self.body.encode(), body) is not None
        )


class FaultProxy:
    """The proxy: ``url`` is where clients go instead of ``upstream``."""

    def __init__(self, upstream: str) -> None:
        """A proxy for ``upstream`` (not started yet) on a free loopback port."""
        self.upstream = upstream.rstrip("/")
        self.faults: list[Fault] = []
        self.seen: list[tuple[str, str, int, str]] = []
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """The proxy's base URL, in place of the server's."""
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def arm(self, fault: Fault) -> Fault:
        """Lose the answer of the next request ``fault`` matches."""
        with self.lock:
            self.faults.append(fault)
        return fault

    def _take(self, method: str, path: str, body: bytes) -> Fault | None:
        with self.lock:
            for fault in self.faults:
                if fault.matches(method, path, body):
                    fault.fired.append(path)
                    return fault
        return None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self
        sessions = threading.local()  # a requests.Session is not shared between threads

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                """Quiet: ``seen`` records every request."""

            def _relay(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
                if not hasattr(sessions, "session"):
                    sessions.session = requests.Session()
                answer = sessions.session.request(
                    self.command, proxy.upstream + self.path, data=body, headers=headers, timeout=120
                )
                fault = proxy._take(self.command, self.path, body)
                start = body[:300].decode(errors="replace")
                with proxy.lock:
                    proxy.seen.append((self.command, self.path, answer.status_code, start))
                if fault is not None and fault.after == "drop":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if fault is not None:
                    self._answer(503, UNAVAILABLE, {"Content-Type": "application/json"})
                    return
                keep = {k: v for k, v in answer.headers.items() if k.lower() not in HOP_BY_HOP}
                self._answer(answer.status_code, answer.content, keep)

            def _answer(self, status: int, content: bytes, headers: dict[str, str]) -> None:
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

            do_GET = do_POST = do_HEAD = do_DELETE = do_PUT = _relay

        return Handler


@contextmanager
def fault_proxy(upstream: str) -> Iterator[FaultProxy]:
    """A started proxy for ``upstream``, stopped on exit."""
    proxy = FaultProxy(upstream)
    proxy.thread.start()
    try:
        yield proxy
    finally:
        proxy.server.shutdown()
        proxy.server.server_close()
