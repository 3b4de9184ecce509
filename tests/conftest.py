"""Test-session settings shared by every suite.

The suite runs in parallel workers (pytest-xdist, `--dist loadgroup`; see pyproject.toml): most tests
own their temp dirs, ports and PostgreSQL schemas. Tests that share one real part of the machine run
in one worker, in a group: the Slurm cluster the Slurm suite starts (one per worker that needs it
would double its cost), the podman image the container tests make, and the private PostgreSQL
cluster the store outage tests stop and start.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from corral.store import Store

GROUPS = {
    "tests/slurm/": "slurm",
    "tests/agent/test_container.py": "podman",
    "tests/e2e/test_container_job.py": "podman",
    "tests/test_store_outage.py": "private-postgresql",
}


# First: pytest-xdist's worker reads the groups in its own hook of this name, and in its order the
# groups were added after it had read them, so each worker ran Slurm tests (and its own Slurm).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        for prefix, group in GROUPS.items():
            if path.startswith(prefix):
                item.add_marker(pytest.mark.xdist_group(group))
    # The groups first: each runs in one worker, one test after another (the Slurm group for
    # minutes), and sent last it would run on after the other workers ran out of tests.
    items.sort(key=lambda item: item.get_closest_marker("xdist_group") is None)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Store]]:
    """A corral server's app on a port of its own (tests.support.served_app): its URL and its store."""
    from tests.support import served_app  # the server app: only for the tests that ask for it

    with served_app(tmp_path) as app:
        yield app
