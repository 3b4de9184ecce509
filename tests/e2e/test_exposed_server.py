"""A corral that listens beyond this machine over plain HTTP says so at start: every request carries
a credential (the API token, a node's secret, a boot token), which anyone on the path reads."""

from __future__ import annotations

from tests.e2e.conftest import CONFIG, Corral


def test_plain_http_beyond_loopback_is_warned_of_and_loopback_is_not(corral: Corral) -> None:
    corral.start()
    corral.stop()
    assert "plain HTTP" not in corral.server_log()
    corral.config.write_text(CONFIG + '\n[server]\nhost = "0.0.0.0"\n')
    corral.start()
    log = corral.server_log()
    assert (
        f"corral listens on 0.0.0.0:{corral.port} over plain HTTP: the API token, the nodes' secrets and their"
        " boot tokens cross the network readable by anyone on the path; set server.tls_cert and server.tls_key,"
        " or listen on 127.0.0.1 behind a TLS proxy"
    ) in log, log
