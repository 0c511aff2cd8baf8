"""Bearer token on every endpoint, TLS on both receivers, and the bind address."""

from __future__ import annotations

import datetime as dt
import ipaddress
import sys

import grpc
import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from google.rpc import code_pb2, status_pb2
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from tests.cli_runner import run_cli as _run_cli
from tests.collector.collector_proc import CollectorProcess, make_request
from tests.otlp_builders import sdk_spans as recorded_spans

TOKEN = "s3cret-token-for-tests"
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
PROTOBUF = {"Content-Type": "application/x-protobuf"}


def sdk_spans(count: int, target: str):
    def write(tracer):
        for i in range(count):
            with tracer.start_as_current_span("chat m", attributes={"meritlens.target.id": target, "i": i}):
                pass

    return recorded_spans(write)


@pytest.fixture(scope="module")
def token_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("secret") / "token"
    path.write_text(TOKEN + "\n")
    return path


@pytest.fixture(scope="module")
def guarded(tmp_path_factory, token_file):
    db = tmp_path_factory.mktemp("auth") / "spans.duckdb"
    with CollectorProcess(db, args=("--token-file", str(token_file)), token=TOKEN) as running:
        yield running


@pytest.mark.parametrize(
    ("method", "path", "kwargs"),
    [
        ("POST", "/v1/traces", {"content": make_request(1, 2).SerializeToString(), "headers": PROTOBUF}),
        ("POST", "/api/sql", {"json": {"sql": "SELECT count(*) FROM spans"}}),
        ("GET", "/healthz", {}),
    ],
)
@pytest.mark.parametrize("authorization", [None, "Bearer wrong-token", f"Basic {TOKEN}", f"Bearer {TOKEN}x"])
def test_every_http_endpoint_refuses_a_missing_or_wrong_token(guarded, method, path, kwargs, authorization):
    kwargs = dict(kwargs)  # the parameter dict is shared between cases
    headers = dict(kwargs.pop("headers", {}))
    if authorization:
        headers["Authorization"] = authorization
    with httpx.Client(base_url=guarded.url) as client:
        response = client.request(method, path, headers=headers, **kwargs)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    if path == "/v1/traces":
        status = status_pb2.Status.FromString(response.content)
        assert status.code == code_pb2.UNAUTHENTICATED and "bearer token" in status.message
    else:
        assert "bearer token" in response.json()["error"]


def test_the_right_token_opens_every_http_endpoint(guarded):
    request = make_request(2, 3)
    with guarded.client() as client:
        assert client.get("/healthz").status_code == 200
        assert client.post("/v1/traces", content=request.SerializeToString(), headers=PROTOBUF).status_code == 200
        span_id = request.resource_spans[0].scope_spans[0].spans[0].span_id.hex()
        result = client.post("/api/sql", json={"sql": f"SELECT count(*) FROM spans WHERE span_id = '{span_id}'"})
    assert result.status_code == 200 and result.json()["rows"] == [[1]]


def test_grpc_refuses_a_missing_token_and_the_exporter_sends_it_from_headers(guarded):
    with grpc.insecure_channel(guarded.grpc_target) as channel:
        with pytest.raises(grpc.RpcError) as caught:
            channel.unary_unary(EXPORT)(make_request(3, 1).SerializeToString(), timeout=10)
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.RpcError) as caught:
            channel.unary_unary(EXPORT)(
                make_request(3, 1).SerializeToString(), timeout=10, metadata=(("authorization", "Bearer nope"),)
            )
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    exporter = GrpcSpanExporter(
        endpoint=guarded.grpc_target, insecure=True, headers={"authorization": f"Bearer {TOKEN}"}, timeout=10
    )
    assert exporter.export(sdk_spans(4, "grpc/token")) == SpanExportResult.SUCCESS
    exporter.shutdown()
    assert guarded.sql("SELECT count(*) FROM spans WHERE target_id = 'grpc/token'")["rows"] == [[4]]


def run_cli(*args, env=None):
    return _run_cli(*args, check=False, env=env, timeout=60)


def test_cli_query_client_sends_the_token_from_env_option_or_file(guarded, token_file):
    query = "SELECT count(*) AS n FROM spans"
    refused = run_cli("sql", query, "--url", guarded.url)
    assert refused.returncode != 0
    assert "bearer token" in refused.stderr
    by_env = run_cli("sql", query, "--url", guarded.url, "--format", "csv", env={"MERITLENS_TOKEN": TOKEN})
    assert by_env.returncode == 0, by_env.stderr
    assert by_env.stdout.splitlines()[0] == "n"
    by_file = run_cli("sql", query, "--db", str(guarded.db), "--token-file", str(token_file), "--format", "csv")
    assert by_file.returncode == 0, by_file.stderr  # the file is held: it goes through the collector's URL
    assert by_file.stdout.splitlines()[0] == "n"
    windows = run_cli("windows", "--db", str(guarded.db), "--format", "csv",
                      env={"MERITLENS_TOKEN_FILE": str(token_file)})
    assert windows.returncode == 0, windows.stderr  # other commands send the token from the environment
    assert windows.stdout.startswith("target_id,")
    unauthorized = run_cli("windows", "--db", str(guarded.db))
    assert unauthorized.returncode != 0 and "bearer token" in unauthorized.stderr


# --- TLS ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    """A self-signed certificate for 127.0.0.1 and localhost, and its key."""
    directory = tmp_path_factory.mktemp("tls")
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "meritlens test")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost"),
        ]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ))
    return cert_path, key_path


def test_tls_on_both_receivers_with_the_real_exporters_and_the_cli(tmp_path, certificate, monkeypatch):
    cert_path, key_path = certificate
    # requests lets these override the exporter's certificate_file.
    monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
    monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)
    args = ("--tls-cert", str(cert_path), "--tls-key", str(key_path))
    with CollectorProcess(tmp_path / "tls.duckdb", args=args, ca_file=str(cert_path)) as collector:
        assert collector.url.startswith("https://")
        with pytest.raises(httpx.ConnectError):  # plain HTTP client without the CA: refused
            httpx.get(f"{collector.url}/healthz", verify=True)
        with pytest.raises(httpx.HTTPError):  # plain text on a TLS port
            httpx.get(f"http://127.0.0.1:{collector.http_port}/healthz", timeout=5)
        http_exporter = HttpSpanExporter(
            endpoint=f"{collector.url}/v1/traces", certificate_file=str(cert_path), timeout=10
        )
        assert http_exporter.export(sdk_spans(3, "tls/http")) == SpanExportResult.SUCCESS
        http_exporter.shutdown()
        credentials = grpc.ssl_channel_credentials(root_certificates=cert_path.read_bytes())
        grpc_exporter = GrpcSpanExporter(endpoint=collector.grpc_target, credentials=credentials, timeout=10)
        assert grpc_exporter.export(sdk_spans(2, "tls/grpc")) == SpanExportResult.SUCCESS
        grpc_exporter.shutdown()
        with grpc.insecure_channel(collector.grpc_target) as channel:  # no TLS: no answer
            with pytest.raises(grpc.RpcError) as caught:
                channel.unary_unary(EXPORT)(make_request(4, 1).SerializeToString(), timeout=3)
            assert caught.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
        query = "SELECT target_id, count(*) FROM spans GROUP BY 1 ORDER BY 1"
        result = run_cli("sql", query, "--db", str(collector.db), "--format", "csv", "--tls-ca", str(cert_path))
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines()[1:] == ["tls/grpc,2", "tls/http,3"]
        untrusted = run_cli("sql", query, "--db", str(collector.db))
        assert untrusted.returncode != 0 and "CERTIFICATE_VERIFY_FAILED" in untrusted.stderr


# --- bind address --------------------------------------------------------------------------------------
def listening_addresses(port: int) -> set[str]:
    """Local addresses (hex, as in /proc/net/tcp) with a socket listening on ``port``."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            address, hex_port = fields[1].split(":")
            if int(hex_port, 16) == port and fields[3] == "0A":  # LISTEN
                found.add(address)
    return found


def test_binds_loopback_by_default(tmp_path):
    with CollectorProcess(tmp_path / "loop.duckdb") as collector:
        assert listening_addresses(collector.http_port) == {"0100007F"}  # 127.0.0.1
        grpc_addresses = listening_addresses(collector.grpc_port)
        assert grpc_addresses and all(a in ("0100007F", "0000000000000000FFFF00000100007F") for a in grpc_addresses)
    assert "without a token" not in collector.log()


def test_public_bind_without_a_token_warns_and_with_a_token_does_not(tmp_path, token_file):
    with CollectorProcess(tmp_path / "open.duckdb", args=("--host", "0.0.0.0")) as collector:
        assert listening_addresses(collector.http_port) == {"00000000"}
    assert "listening on 0.0.0.0 without a token" in collector.log()
    args = ("--host", "0.0.0.0", "--token-file", str(token_file))
    with CollectorProcess(tmp_path / "closed.duckdb", args=args, token=TOKEN) as collector:
        pass
    assert "without a token" not in collector.log()


def test_invalid_settings_are_refused_at_start_with_a_clear_message(tmp_path, token_file):
    result = run_cli("serve", "--db", str(tmp_path / "x.duckdb"), "--max-body-bytes", "128MiB")
    assert result.returncode == 2
    assert "the memory limit must be at least 2560MiB, got 512MiB" in result.stderr
    result = run_cli("serve", "--db", str(tmp_path / "x.duckdb"), "--tls-cert", str(token_file))
    assert result.returncode == 2 and "--tls-key" in result.stderr
    result = run_cli("serve", "--db", str(tmp_path / "x.duckdb"), "--max-body-bytes", "lots")
    assert result.returncode == 2 and "is not a byte count" in result.stderr
    result = run_cli("serve", "--db", str(tmp_path / "x.duckdb"), env={"MERITLENS_MEMORY_LIMIT": "0"})
    assert result.returncode == 2 and "memory limit must be positive" in result.stderr
    result = run_cli("serve", "--db", str(tmp_path / "x.duckdb"), "--memory-limit", "128MiB")
    assert result.returncode == 2 and "the memory limit must be at least 493MiB" in result.stderr
    result = run_cli("serve", "--db", str(tmp_path / "x.duckdb"), "--checkpoint-wal-bytes", "0")
    assert result.returncode == 2 and "checkpoint WAL bytes must be positive" in result.stderr
    assert not (tmp_path / "x.duckdb").exists()
    assert sys.executable  # the CLI ran from this interpreter's environment


def test_a_second_collector_cannot_share_the_grpc_port(tmp_path):
    # gRPC sets SO_REUSEPORT by default, which would let two collectors split one port's traffic.
    with CollectorProcess(tmp_path / "first.duckdb") as first:
        second = CollectorProcess(tmp_path / "second.duckdb", grpc_port=first.grpc_port)
        try:
            in_use = r"port \d+ on 127.0.0.1 is already in use: choose another with --grpc-port"
            with pytest.raises(RuntimeError, match=in_use):
                second.start(timeout=20)
            assert second.proc.wait(10) == 2
            assert listening_addresses(second.http_port) == set()  # it closed what it had opened
        finally:
            second.kill9()
