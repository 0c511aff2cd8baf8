"""SIGTERM: stop accepting, let in-flight requests finish and commit, then exit 0."""

from __future__ import annotations

import signal
import socket
import time

import duckdb

from tests.collector.collector_proc import CollectorProcess, make_request


def _read_response(sock: socket.socket) -> bytes:
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk


def test_sigterm_drains_a_request_in_flight_and_commits_it(tmp_path):
    collector = CollectorProcess(tmp_path / "drain.duckdb", args=("--shutdown-timeout", "20"))
    collector.start()
    request = make_request(7, 400)
    body = request.SerializeToString()
    sock = socket.create_connection(("127.0.0.1", collector.http_port), timeout=30)
    idle = socket.create_connection(("127.0.0.1", collector.http_port), timeout=30)  # a keep-alive client
    try:
        head = (
            f"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-protobuf\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode()
        sock.sendall(head + body[: len(body) // 2])
        time.sleep(0.5)  # the handler is now reading the body
        collector.proc.send_signal(signal.SIGTERM)
        time.sleep(1.0)
        assert collector.proc.poll() is None, "exited with a request in flight"
        try:
            socket.create_connection(("127.0.0.1", collector.http_port), timeout=2).close()
            accepting = True
        except OSError:
            accepting = False
        assert not accepting, "still accepting new connections after SIGTERM"
        small = make_request(8, 2).SerializeToString()
        idle.sendall((
            f"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-protobuf\r\n"
            f"Content-Length: {len(small)}\r\n\r\n"
        ).encode() + small)
        refused = _read_response(idle)
        assert refused.startswith(b"HTTP/1.1 503"), refused[:200]
        assert b"Retry-After: 1" in refused and b"shutting down" in refused
        sock.sendall(body[len(body) // 2:])
        response = _read_response(sock)
    finally:
        sock.close()
        idle.close()
    assert response.startswith(b"HTTP/1.1 200"), response[:200]
    assert collector.proc.wait(30) == 0
    log = collector.log()
    assert "stopping: draining in-flight requests" in log and "stopped;" in log
    con = duckdb.connect(str(collector.db), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM spans").fetchone()[0] == 400
        assert con.execute("SELECT sum(sample_count) FROM windows WHERE metric = 'input_tokens'").fetchone()[0] > 0
    finally:
        con.close()
    assert not (tmp_path / "drain.duckdb.collector").exists()


def test_a_request_still_uploading_gets_half_the_shutdown_timeout_then_the_collector_stops(tmp_path):
    collector = CollectorProcess(tmp_path / "stuck.duckdb", args=("--no-grpc",))
    collector.start()
    body = make_request(9, 400).SerializeToString()
    sock = socket.create_connection(("127.0.0.1", collector.http_port), timeout=60)
    try:
        sock.sendall((
            f"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-protobuf\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode() + body[: len(body) // 2])  # the rest never comes
        collector.wait_for_log("OTLP/HTTP listening")
        time.sleep(0.5)  # the handler is now reading the body
        collector.proc.send_signal(signal.SIGTERM)
        assert collector.proc.wait(60) == 0
        response = _read_response(sock)
    finally:
        sock.close()
    assert not response.startswith(b"HTTP/1.1 200"), response[:200]
    log = collector.log()
    assert "1 requests still in progress after 5s; closing them" in log  # the default 10 s, halved
    assert "stopped;" in log
    con = duckdb.connect(str(collector.db), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM spans").fetchone()[0] == 0
    finally:
        con.close()
