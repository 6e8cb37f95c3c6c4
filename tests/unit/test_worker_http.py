"""The HTTP executor against a local server: headers, classification, timeouts, SSRF, pinning.

These use a real socket on 127.0.0.1 (so the private-address guard is switched off except in the
tests about the guard) and a fake resolver, so no test depends on DNS.
"""

from __future__ import annotations

import ipaddress
import shutil
import ssl
import subprocess
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from duetime.egress.resolver import GuardedResolver
from duetime.egress.ssrf import IPAddress, TargetRefused
from duetime.model import HttpTarget, SecretRef
from duetime_workers.http_target import HttpExecutor
from duetime_workers.outcome import AttemptOutcome, OutcomeKind
from duetime_workers.secret_store import SecretStore
from duetime_workers.transport import HttpClient, make_http_client
from tests.fixtures.target import TargetServer

RUN_ID = uuid.UUID("6a1f3c2e-0b7d-4e59-9d41-1c2b3a4d5e6f")
SCHEDULED = datetime(2026, 1, 1, tzinfo=UTC)


class _Server:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str, dict[str, str], bytes]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                server.seen.append((self.command, self.path, dict(self.headers.items()), body))
                if self.path == "/slow":
                    time.sleep(2)
                first = self.path.strip("/").split("/")[0]
                status = int(first) if first.isdigit() else 200
                if first == "echo-auth":  # a target that quotes the credential back in its reason
                    self.send_response(500, f"bad {self.headers.get('Authorization')}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(status)
                if status in (302,):
                    self.send_header("Location", "http://169.254.169.254/latest/meta-data/")
                if status in (429, 503):
                    self.send_header("Retry-After", "42")
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST = do_PUT = _handle

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.httpd = TargetServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def _shared_server() -> Iterator[_Server]:
    s = _Server()
    yield s
    s.close()


@pytest.fixture
def server(_shared_server: _Server) -> _Server:
    _shared_server.seen.clear()
    return _shared_server


async def _resolve_to_loopback(host: str, port: int) -> list[IPAddress]:
    return [ipaddress.ip_address("127.0.0.1")]


@pytest.fixture
async def executor() -> AsyncIterator[HttpExecutor]:
    client = make_http_client(allow_private=True, max_connections=4, resolver=_resolve_to_loopback)
    yield HttpExecutor(client, "duetime-worker/test", now=lambda: datetime.now(UTC))
    await client.aclose()


async def _call(executor: HttpExecutor, target: HttpTarget, attempt: int = 1) -> AttemptOutcome:
    return await executor.execute(
        target,
        run_id=RUN_ID,
        attempt=attempt,
        fencing_token=2 * attempt,
        scheduled_for=SCHEDULED,
    )


async def test_success_sends_the_contract_headers(server: _Server, executor: HttpExecutor) -> None:
    target = HttpTarget(
        url=f"http://127.0.0.1:{server.port}/hook",
        method="put",
        headers=(("X-Team", "billing"), ("Idempotency-Key", "forged")),
        body='{"a": 1}',
    )
    outcome = await _call(executor, target, attempt=3)
    assert outcome == AttemptOutcome(OutcomeKind.SUCCEEDED, status_code=200)
    ((method, path, headers, body),) = server.seen
    assert (method, path, body) == ("PUT", "/hook", b'{"a": 1}')
    assert headers["Idempotency-Key"] == f"{RUN_ID}:3"
    assert headers["X-Duetime-Run-Id"] == str(RUN_ID)
    assert headers["X-Duetime-Attempt"] == "3"
    assert headers["X-Duetime-Fencing-Token"] == "6"
    assert headers["X-Duetime-Scheduled-For"] == "2026-01-01T00:00:00Z"
    assert headers["User-Agent"] == "duetime-worker/test"
    assert headers["X-Team"] == "billing"


async def test_a_name_connects_to_the_resolved_address_and_keeps_its_host(
    server: _Server, executor: HttpExecutor
) -> None:
    # "billing.internal.test" does not exist in DNS: the request can only arrive if the
    # connection went to the address the guard's resolver returned.
    target = HttpTarget(url=f"http://billing.internal.test:{server.port}/x")
    assert (await _call(executor, target)).succeeded
    assert server.seen[0][2]["Host"] == f"billing.internal.test:{server.port}"


@pytest.mark.parametrize(
    ("path", "kind", "status"),
    [
        ("/500", OutcomeKind.RETRYABLE, 500),
        ("/400", OutcomeKind.FINAL, 400),
        ("/404", OutcomeKind.FINAL, 404),
        ("/408", OutcomeKind.RETRYABLE, 408),
        ("/429", OutcomeKind.RETRYABLE, 429),
    ],
)
async def test_statuses(
    server: _Server, executor: HttpExecutor, path: str, kind: OutcomeKind, status: int
) -> None:
    outcome = await _call(executor, HttpTarget(url=f"http://127.0.0.1:{server.port}{path}"))
    assert (outcome.kind, outcome.status_code) == (kind, status)


async def test_retry_after_is_read_from_a_503(server: _Server, executor: HttpExecutor) -> None:
    outcome = await _call(executor, HttpTarget(url=f"http://127.0.0.1:{server.port}/503"))
    assert outcome.kind is OutcomeKind.RETRYABLE
    assert outcome.retry_after == timedelta(seconds=42)


async def test_redirects_are_not_followed(server: _Server, executor: HttpExecutor) -> None:
    outcome = await _call(executor, HttpTarget(url=f"http://127.0.0.1:{server.port}/302"))
    assert (outcome.kind, outcome.status_code) == (OutcomeKind.FINAL, 302)
    assert len(server.seen) == 1  # the Location (the metadata service) was never requested


async def test_timeout_is_retryable(server: _Server, executor: HttpExecutor) -> None:
    target = HttpTarget(
        url=f"http://127.0.0.1:{server.port}/slow", timeout=timedelta(milliseconds=200)
    )
    started = time.monotonic()
    outcome = await _call(executor, target)
    assert outcome.kind is OutcomeKind.RETRYABLE
    assert outcome.error == "timed out after 0.2s"
    assert time.monotonic() - started < 1.5


async def test_connection_refused_is_retryable(executor: HttpExecutor) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    outcome = await _call(executor, HttpTarget(url=f"http://127.0.0.1:{port}/"))
    assert outcome.kind is OutcomeKind.RETRYABLE
    assert outcome.error and outcome.error.startswith(
        "ConnectionError: cannot connect to 127.0.0.1"
    )


@pytest.mark.parametrize(
    "url",
    ["ftp://example.com/x", "file:///etc/passwd", "http:///nohost", "not a url", "//x"],
)
async def test_unusable_urls_are_final(executor: HttpExecutor, url: str) -> None:
    outcome = await _call(executor, HttpTarget(url=url))
    assert outcome.kind is OutcomeKind.FINAL
    assert outcome.error and outcome.error.startswith("invalid")


async def test_header_injection_is_final(executor: HttpExecutor) -> None:
    target = HttpTarget(url="http://127.0.0.1:1/", headers=(("X-A", "b\r\nHost: evil"),))
    outcome = await _call(executor, target)
    assert outcome.kind is OutcomeKind.FINAL


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        "[::1]",
        "0x7f000001",
        "2130706433",
        "127.1",
        "[::ffff:127.0.0.1]",
        "169.254.169.254",
        "10.1.2.3",
        "100.64.0.1",
    ],
)
async def test_guard_refuses_private_targets_before_connecting(server: _Server, host: str) -> None:
    client = make_http_client(allow_private=False, max_connections=2)
    try:
        outcome = await _call(
            HttpExecutor(client, "ua"), HttpTarget(url=f"http://{host}:{server.port}/")
        )
    finally:
        await client.aclose()
    assert outcome.kind is OutcomeKind.FINAL
    assert outcome.error and outcome.error.startswith("target refused")
    assert server.seen == []


async def test_guard_refuses_a_name_that_resolves_privately(server: _Server) -> None:
    client = make_http_client(allow_private=False, max_connections=2, resolver=_resolve_to_loopback)
    try:
        target = HttpTarget(url=f"http://innocent.example:{server.port}/")
        outcome = await _call(HttpExecutor(client, "ua"), target)
    finally:
        await client.aclose()
    assert outcome.kind is OutcomeKind.FINAL
    assert outcome.error and "'innocent.example' resolves to 127.0.0.1" in outcome.error
    assert server.seen == []


async def test_guard_resolves_on_every_connection_and_checks_every_answer() -> None:
    """DNS rebinding: a name whose second answer turns private is refused on that lookup.

    The connector connects to exactly the address list the resolver approved, so there is no second,
    unchecked lookup between the check and the connect.
    """
    answers = [ipaddress.ip_address("93.184.216.34"), ipaddress.ip_address("10.0.0.9")]
    lookups: list[str] = []

    async def flipping(host: str, port: int) -> list[IPAddress]:
        lookups.append(host)
        return [answers[min(len(lookups) - 1, 1)]]

    backend = GuardedResolver(allow_private=False, resolver=flipping)
    assert await backend.addresses("rebind.example", 80) == [answers[0]]
    with pytest.raises(TargetRefused, match=r"resolves to 10\.0\.0\.9"):
        await backend.addresses("rebind.example", 80)
    assert lookups == ["rebind.example", "rebind.example"]


@pytest.fixture
def self_signed(tmp_path: Path) -> tuple[Path, Path]:
    """A certificate for the name ``pinned.test`` (made with the openssl command)."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-subj",
            "/CN=pinned.test",
            "-addext",
            "subjectAltName=DNS:pinned.test",
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


async def test_https_to_a_pinned_address_still_verifies_the_name(
    self_signed: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """TLS goes to the approved IP, but SNI and certificate checks use the URL's host name."""
    cert, key = self_signed
    server = _Server()
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    server.httpd.socket = tls.wrap_socket(server.httpd.socket, server_side=True)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # trust our test CA (SSL_CERT_FILE is honoured)
    client = make_http_client(allow_private=True, max_connections=2, resolver=_resolve_to_loopback)
    try:
        executor = HttpExecutor(client, "ua")
        good = await _call(executor, HttpTarget(url=f"https://pinned.test:{server.port}/ok"))
        # Same IP, another name: the certificate does not match, so TLS fails (retryable).
        bad = await _call(executor, HttpTarget(url=f"https://other.test:{server.port}/ok"))
    finally:
        await client.aclose()
        server.close()
    assert good.succeeded, good
    assert bad.kind is OutcomeKind.RETRYABLE
    assert bad.error and "CERTIFICATE_VERIFY_FAILED" in bad.error


# --- secret header values ----------------------------------------------------------------------
@pytest.fixture
async def secret_executor(tmp_path: Path) -> AsyncIterator[HttpExecutor]:
    (tmp_path / "billing-api-token").write_text("s3cr3t-token-value\n")
    secrets = SecretStore(
        directory=tmp_path,
        environ={"DUETIME_SECRET_CRM_KEY": "crm-key-value"},
        worker_id="w-http",
    )
    client = make_http_client(allow_private=True, max_connections=4)
    yield HttpExecutor(client, "ua", secrets=secrets)
    await client.aclose()


async def test_secret_references_are_resolved_into_the_request(
    server: _Server, secret_executor: HttpExecutor
) -> None:
    target = HttpTarget(
        url=f"http://127.0.0.1:{server.port}/hook",
        headers=(
            ("Authorization", SecretRef("billing-api-token", "Bearer ")),
            ("X-Api-Key", SecretRef("crm-key")),
            ("X-Team", "billing"),
        ),
    )
    assert (await _call(secret_executor, target)).succeeded
    ((_method, _path, headers, _body),) = server.seen
    assert headers["Authorization"] == "Bearer s3cr3t-token-value"
    assert headers["X-Api-Key"] == "crm-key-value"
    assert headers["X-Team"] == "billing"


async def test_a_missing_secret_fails_the_attempt_as_retryable_before_any_call(
    server: _Server, secret_executor: HttpExecutor
) -> None:
    target = HttpTarget(
        url=f"http://127.0.0.1:{server.port}/hook",
        headers=(("Authorization", SecretRef("not-provisioned", "Bearer ")),),
    )
    outcome = await _call(secret_executor, target)
    assert outcome.kind is OutcomeKind.RETRYABLE
    assert outcome.error is not None
    assert outcome.error.startswith("secret 'not-provisioned' not found on worker w-http (")
    assert "DUETIME_SECRET_NOT_PROVISIONED" in outcome.error
    assert server.seen == []


async def test_without_a_secret_store_a_reference_is_not_found(server: _Server) -> None:
    client = make_http_client(allow_private=True, max_connections=2)
    try:
        target = HttpTarget(
            url=f"http://127.0.0.1:{server.port}/hook",
            headers=(("Authorization", SecretRef("tok")),),
        )
        outcome = await _call(HttpExecutor(client, "ua"), target)
    finally:
        await client.aclose()
    assert outcome.kind is OutcomeKind.RETRYABLE
    assert outcome.error and "secret 'tok' not found" in outcome.error
    assert server.seen == []


async def test_a_secret_echoed_by_the_target_is_redacted_from_the_error(
    server: _Server, secret_executor: HttpExecutor
) -> None:
    target = HttpTarget(
        url=f"http://127.0.0.1:{server.port}/echo-auth",
        headers=(("Authorization", SecretRef("billing-api-token", "Bearer ")),),
    )
    outcome = await _call(secret_executor, target)
    assert (outcome.kind, outcome.status_code) == (OutcomeKind.RETRYABLE, 500)
    assert outcome.error == "HTTP 500 bad Bearer [secret]"


async def test_an_unexpected_error_quoting_a_secret_is_redacted(tmp_path: Path) -> None:
    """The attempt runner logs an executor's unexpected exception with its repr."""
    (tmp_path / "tok").write_text("s3cr3t-token-value")

    class Exploding(HttpClient):
        async def request(self, method: str, url: Any, headers: Any, body: Any) -> Any:
            raise KeyError(f"cannot send {headers}")

    client = Exploding(
        GuardedResolver(allow_private=True),
        max_connections=1,
        ssl_context=ssl.create_default_context(),
    )
    executor = HttpExecutor(
        client, "ua", secrets=SecretStore(directory=tmp_path, environ={}, worker_id="w")
    )
    target = HttpTarget(url="http://127.0.0.1:1/", headers=(("Authorization", SecretRef("tok")),))
    with pytest.raises(RuntimeError) as info:
        await _call(executor, target)
    assert "s3cr3t-token-value" not in repr(info.value)
    assert "KeyError" in str(info.value) and "[secret]" in str(info.value)
    assert info.value.__cause__ is None and info.value.__suppress_context__
