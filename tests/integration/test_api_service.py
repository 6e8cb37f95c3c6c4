"""``duetime service api`` as a process (uvicorn on 127.0.0.1) and ``duetime tokens``.

Tokens must never reach a log: the access log of real requests, with good and bad tokens, is
read back and searched for them, and for the code of a one-time sign-in link used twice.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import psycopg
import pytest

from duetime.cli.main import main
from duetime.store import Store
from duetime.store.sign_in_links import sign_in_links_create
from duetime.store.tokens import tokens_create
from duetime_infra.ports import find_free_port
from tests.fixtures.polling import wait_for

from .api_client import http_job

pytestmark = pytest.mark.integration

_TOKEN = re.compile(r"^dt_([a-z0-9]{12})_[A-Za-z0-9_-]{43}$")


def _plain_url(database_url: str) -> str:
    return database_url.replace("postgresql+psycopg://", "postgresql://")


def test_tokens_create_list_revoke(cli_env: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tokens", "create", "--tenant", "acme", "--name", "billing team"]) == 0
    token = capsys.readouterr().out.strip()
    match = _TOKEN.match(token)
    assert match, token
    token_id = match.group(1)
    assert main(["tokens", "create", "--admin"]) == 0
    admin_token = capsys.readouterr().out.strip()
    assert _TOKEN.match(admin_token)

    assert main(["tokens", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(t["tenant"], t["admin"], t["name"]) for t in listed] == [
        ("acme", False, "billing team"),
        (None, True, ""),
    ]
    assert token not in json.dumps(listed) and admin_token not in json.dumps(listed)
    # Only the hash is stored: no column of any token row holds the token.
    with psycopg.connect(_plain_url(cli_env)) as conn:
        rows = conn.execute("SELECT * FROM api_tokens").fetchall()
        stored = conn.execute(
            "SELECT token_sha256 FROM api_tokens WHERE token_id = %s", (token_id,)
        ).fetchone()
    assert token not in repr(rows) and token.split("_", 2)[2] not in repr(rows)
    assert stored is not None and bytes(stored[0]) == hashlib.sha256(token.encode()).digest()

    assert main(["tokens", "revoke", token_id]) == 0
    assert capsys.readouterr().out == f"{token_id}: revoked\n"
    assert main(["tokens", "revoke", token_id]) == 3  # already revoked
    assert main(["tokens", "revoke", "not-an-id"]) == 2
    assert main(["tokens", "create", "--tenant", "Not Valid"]) == 2
    assert main(["tokens", "list", "--json", "--tenant", "acme"]) == 0
    [acme] = json.loads(capsys.readouterr().out)
    assert acme["revoked_at"] is not None


def test_api_process_serves_and_logs_no_token(database_url: str, tmp_path: Path) -> None:
    store = Store(database_url, pool_size=1)
    try:
        with store.tx() as tx:
            tenant_token = tokens_create(tx.conn, tenant="acme")[0].token
            admin = tokens_create(tx.conn, tenant=None)[0]
            admin_token = admin.token
            link_code = sign_in_links_create(tx.conn, admin.token_id).code
    finally:
        store.close()
    # A well-formed token with a known id but the wrong secret: refused, and not logged either.
    forged = tenant_token[:-8] + "ZZZZZZZZ"
    port = find_free_port()
    log_path = tmp_path / "api.log"
    env = {
        **os.environ,
        "DUETIME_DATABASE_URL": database_url,
        "DUETIME_DATA_DIR": str(tmp_path / "data"),
        "DUETIME_LOG_LEVEL": "DEBUG",  # everything uvicorn and duetime would ever say
    }
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "duetime.cli.main", "service", "api", "--port", str(port)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        base = f"http://127.0.0.1:{port}"

        def healthy() -> bool:
            try:
                return httpx.get(f"{base}/healthz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for("the API to listen", healthy, timeout=30)
        with httpx.Client(base_url=base, timeout=10) as client:
            acme = {"Authorization": f"Bearer {tenant_token}"}
            created = client.post("/v1/jobs", json=http_job("logged"), headers=acme)
            assert created.status_code == 201, created.text
            assert client.get("/v1/jobs", headers=acme).json()["items"][0]["id"] == "logged"
            admin = {"Authorization": f"Bearer {admin_token}"}
            assert client.get("/v1/jobs/logged", headers=admin).status_code == 200
            refused = client.get("/v1/jobs", headers={"Authorization": f"Bearer {forged}"})
            assert refused.status_code == 401
            document = client.get("/openapi.json")
            assert document.status_code == 200 and "/v1/jobs" in document.json()["paths"]
            # The one-time sign-in link, used and then used again: its path is in a URL.
            assert client.get(f"/ui/sign-in/{link_code}").status_code == 303
            assert client.get(f"/ui/sign-in/{link_code}?again=1").status_code == 410
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=20)
    assert code == 0
    text = log_path.read_text(encoding="utf-8", errors="replace")
    # The log is there (access lines and the refusal) ...
    assert '"POST /v1/jobs HTTP/1.1" 201' in text, text
    assert '"GET /v1/jobs HTTP/1.1" 401' in text, text
    assert f"api.auth_refused token_id={tenant_token.split('_')[1]}" in text, text
    assert '"GET /ui/sign-in/<redacted> HTTP/1.1" 303' in text, text
    assert '"GET /ui/sign-in/<redacted> HTTP/1.1" 410' in text, text
    assert "dashboard.sign_in_link_refused reason=used" in text, text
    assert link_code not in text
    # ... and holds no token, no secret part of one, no Authorization header.
    for secret in (tenant_token, admin_token, forged):
        assert secret not in text
        assert secret.split("_", 2)[2] not in text
    assert "Bearer" not in text and "authorization" not in text.lower()
