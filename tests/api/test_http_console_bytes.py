"""With the console and no credential, LMQ's routes answer byte for byte as without the console.

A fixed script of requests (push, pull, ack, props, stats, errors, a 404 and a 405) is replayed
on one raw keep-alive connection to a node with the console and to one without; the raw
responses, status line, headers and body, must be equal with only the Date header and the
message ids (random) masked.
"""

from __future__ import annotations

import re
import socket

from pylmq.node.testing import NodeThread, local_options

Script = list[tuple[str, str, bytes, dict[str, str]]]

SCRIPT: Script = [
    ("POST", "/messages/q1", b"hello", {"Content-Type": "text/plain"}),
    ("POST", "/messages/q1", b"{}", {"Content-Type": "application/json"}),
    ("PATCH", "/properties/q1", b'{"retry": 3, "timeout": 5}', {"Content-Type": "application/json"}),
    ("GET", "/properties/q1", b"", {}),
    ("GET", "/properties", b"", {}),
    ("GET", "/stats", b"", {}),
    ("GET", "/messages/q1?t=0", b"", {}),
    ("POST", "/messages/q1/{id}?reply=ack", b"", {}),
    ("GET", "/messages/q1?t=x", b"", {}),
    ("GET", "/nope", b"", {}),
    ("GET", "/consoles", b"", {}),
    ("DELETE", "/stats", b"", {}),
    ("POST", "/messages/q1/00000000-0000-0000-0000-000000000000?reply=ack", b"", {}),
    ("DELETE", "/queues/q1", b"", {}),
    ("GET", "/messages/q1?t=0", b"", {}),
]

_DATE = re.compile(rb"\r\nDate: [^\r]*\r\n")
_ID = re.compile(rb"x-lmq-message-id: ([0-9a-f-]{36})")


def _read_response(sock: socket.socket, buf: bytearray) -> bytes:
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed mid-response: {bytes(buf)!r}"
        buf += chunk
    end = buf.index(b"\r\n\r\n") + 4
    m = re.search(rb"\r\nContent-Length: (\d+)\r\n", bytes(buf[:end]))
    total = end + (int(m.group(1)) if m else 0)
    while len(buf) < total:
        chunk = sock.recv(65536)
        assert chunk, "connection closed mid-body"
        buf += chunk
    raw = bytes(buf[:total])
    del buf[:total]
    return raw


def _replay(node: NodeThread, script: Script) -> list[bytes]:
    host, port = node.node.http_address or ("", 0)
    out: list[bytes] = []
    last_id = b""
    with socket.create_connection((host, port), timeout=10) as sock:
        buf = bytearray()
        for method, target, body, headers in script:
            target = target.replace("{id}", last_id.decode())
            lines = [f"{method} {target} HTTP/1.1", "Host: localhost", f"Content-Length: {len(body)}"]
            lines += [f"{k}: {v}" for k, v in headers.items()]
            sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
            raw = _read_response(sock, buf)
            m = _ID.search(raw)
            if m:
                last_id = m.group(1)
            out.append(_ID.sub(b"x-lmq-message-id: ID", _DATE.sub(b"\r\nDate: D\r\n", raw)))
    return out


def test_lmq_routes_are_byte_identical_with_and_without_the_console() -> None:
    with (
        NodeThread(local_options(rpc=None, console=True)) as on,
        NodeThread(local_options(rpc=None, console=False)) as off,
    ):
        assert on.node.web is not None and off.node.web is None
        with_console, without = _replay(on, SCRIPT), _replay(off, SCRIPT)
    assert len(with_console) == len(SCRIPT)
    for step, (a, b) in enumerate(zip(with_console, without, strict=True)):
        assert a == b, f"step {step} {SCRIPT[step][:2]}: {a!r} != {b!r}"
    # The script did what it says (so that equal answers are not equal failures).
    statuses = [int(r.split(b" ", 2)[1]) for r in with_console]
    assert statuses == [200, 200, 204, 200, 200, 200, 200, 204, 400, 404, 404, 405, 404, 204, 204]
    assert all(b"Content-Security-Policy" not in r for r in with_console)
