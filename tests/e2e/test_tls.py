"""corral speaking HTTPS itself (server.tls_cert, tls_key): a real `corral run` with a self-signed
certificate made by openssl; its loopback agents pair and run work over TLS (verified with the
certificate: --ca), the CLI finds the CA in server.json, and a client that trusts only the system's
CAs, or speaks plain HTTP, gets nothing."""

from __future__ import annotations

import json
import ssl
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import Corral, wait_until


def self_signed(directory: Path) -> tuple[Path, Path]:
    cert, key = directory / "server.pem", directory / "server-key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-subj", "/CN=corral-test", "-addext", "subjectAltName=IP:127.0.0.1",
            "-keyout", str(key), "-out", str(cert),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


def test_a_corral_with_tls_runs_jobs_on_agents_that_verify_it(corral: Corral, tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    # On every interface: the CLI and the loopback agents still reach it at 127.0.0.1, which the
    # certificate names.
    server = f'\n[server]\nhost = "0.0.0.0"\ntls_cert = "{cert}"\ntls_key = "{key}"\n'
    corral.config.write_text(corral.config.read_text() + server)
    corral.ca = cert
    corral.start()
    info = json.loads((corral.home / "server.json").read_text())
    assert info["url"] == f"https://127.0.0.1:{corral.port}" and info["ca"] == str(cert)

    job = int(corral.cli("submit", "--", "echo", "over tls").stdout)
    wait_until(lambda: corral.jobs()[job]["state"] == "complete", 60, "the job to run on a TLS agent")
    assert corral.cli("logs", str(job)).stdout == "over tls\n"
    assert [e["kind"] for e in corral.cli_json("events", "--kind", "node.paired")] == ["node.paired"]

    # The dashboard's cookie, the API token, goes back over HTTPS only: a browser sends a cookie
    # without Secure to any port of the host over plain HTTP, where anyone on the path reads it.
    token = (corral.home / "token").read_text().strip()
    trusted = ssl.create_default_context(cafile=cert)
    signed_in = httpx.get(f"{corral.base}/dashboard", params={"token": token}, verify=trusted)
    assert signed_in.status_code == 303 and "; secure" in signed_in.headers["set-cookie"].lower()
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        httpx.get(f"{corral.base}/api/health", timeout=5)  # the system's CAs do not know it
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{corral.port}/api/health", timeout=5)


def test_half_a_tls_setting_is_refused_by_name(corral: Corral, tmp_path: Path) -> None:
    cert, _key = self_signed(tmp_path)
    corral.config.write_text(corral.config.read_text() + f'\n[server]\ntls_cert = "{cert}"\n')
    checked = corral.cli("config", "check", str(corral.config), check=False)
    assert checked.returncode != 0
    assert "tls_cert and tls_key go together: give both, or neither" in checked.stdout + checked.stderr
    corral.config.write_text(corral.config.read_text() + f'tls_key = "{tmp_path / "missing.pem"}"\n')
    checked = corral.cli("config", "check", str(corral.config), check=False)
    assert f"tls_key: {tmp_path / 'missing.pem'} is not a file" in checked.stdout + checked.stderr
