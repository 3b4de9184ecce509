"""The dashboard of a running corral (/dashboard): `corral dashboard` prints its address with the
API token, which the page trades for a cookie of its own path; it shows the queue, the nodes and the
recent events as the CLI does, everything users wrote escaped; without the token it refuses."""

from __future__ import annotations

import httpx

from tests.e2e.conftest import Corral, wait_until


def test_the_dashboard_shows_the_system_to_whoever_has_the_token(corral: Corral) -> None:
    corral.start()
    running = int(corral.cli("submit", "--name", "<b>loud</b>", "--", "sleep", "30").stdout)
    corral.cli("submit", "--vcpus", "99", "--", "true")  # no type holds it: it stays queued
    wait_until(lambda: corral.jobs()[running]["state"] == "running", 60, "the job to run")

    address = corral.cli("dashboard").stdout.strip()
    token = (corral.home / "token").read_text().strip()
    assert address == f"{corral.base}/dashboard?token={token}"
    verify = corral.verify
    assert httpx.get(f"{corral.base}/dashboard", verify=verify).status_code == 401
    assert httpx.get(f"{corral.base}/dashboard?token=wrong", verify=verify).status_code == 401

    with httpx.Client(verify=verify, follow_redirects=True) as browser:
        signed_in = browser.get(address)  # follows the redirect, with the cookie it set
        assert [r.status_code for r in signed_in.history] == [303] and signed_in.url.path == "/dashboard"
        assert "token" not in str(signed_in.url)
        cookie = signed_in.history[0].headers["set-cookie"]
        assert "HttpOnly" in cookie and "Path=/dashboard" in cookie and "SameSite=strict" in cookie
        assert "secure" not in cookie.lower()  # over plain HTTP (loopback) a Secure cookie would not come back
        page = signed_in.text
    assert signed_in.status_code == 200
    for response in (signed_in, *signed_in.history):
        policy = response.headers["content-security-policy"]
        assert "default-src 'none'" in policy and "script-src" not in policy  # no script may run
        assert "frame-ancestors 'none'" in policy and response.headers["referrer-policy"] == "no-referrer"
    assert "<script" not in page  # what the policy would block, the page does not need
    assert "no instance type has 99 vcpus" in page  # the queue, with why it waits
    (node,) = corral.live_nodes()
    (dispatcher,) = corral.api("GET", "/api/status").json()["dispatchers"]
    assert node["dispatcher_id"] == dispatcher["id"]  # with several sharing a store, whose node it is
    assert node["id"] in page and "job.running" in page  # the nodes and the events
    assert "&lt;b&gt;loud&lt;/b&gt;" in page and "<b>loud</b>" not in page

    # Charts of the jobs and the fleet, once the server has two samples (one every 5 s of passes).
    def charts() -> str:
        page = httpx.get(f"{corral.base}/dashboard", cookies={"corral_token": token}, verify=verify).text
        return page if page.count("<svg") == 2 else ""

    page = wait_until(charts, 40, "the charts")
    assert "queued (peak 1)" in page and "running (peak 1)" in page and "nodes (peak 1)" in page

    # A node's notes, as `corral nodes` gives them: the page showed only its state's reason.
    corral.cli("node", node["id"], "held=true", "reservation=team-a")
    page = httpx.get(f"{corral.base}/dashboard", cookies={"corral_token": token}, verify=verify).text
    assert "held=true; reservation=team-a" in page
