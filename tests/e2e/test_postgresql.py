"""corral on PostgreSQL, as an operator runs it for several dispatchers: real `corral run`
processes on one store, driven through the real CLI."""

from __future__ import annotations

from tests.e2e.conftest import Dispatchers


def test_a_job_name_longer_than_the_store_keeps_is_refused_by_field(dispatchers: Dispatchers) -> None:
    """Seen: on PostgreSQL (jobs.name is VARCHAR(200)) `corral submit --name <201 characters>`
    answered 'nothing was submitted: Internal Server Error', and so did `corral update --name`."""
    corral = dispatchers.new()
    corral.start()
    later = ("--not-before", "2099-01-01T00:00:00+00:00")  # queued for the whole test
    keeper = corral.cli("submit", "--name", "keeper", *later, "--", "true").stdout.strip()
    refused = corral.cli("submit", "--name", "x" * 201, "--", "true", check=False)
    assert refused.returncode != 0
    assert "--name: a name has at most 200 characters, not 201" in refused.stderr, refused.stderr
    updated = corral.cli("update", keeper, "--name", "y" * 201, check=False)
    assert updated.returncode != 0
    assert "name: a name has at most 200 characters, not 201" in updated.stderr, updated.stderr
    assert [j["name"] for j in corral.jobs().values()] == ["keeper"]
    corral.cli("submit", "--name", "x" * 200, *later, "--", "true")  # the longest it keeps
    assert sorted(len(j["name"]) for j in corral.jobs().values()) == [6, 200]
