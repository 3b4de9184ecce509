"""What a DBA sees of corral's sessions in pg_stat_activity."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from corral.store import Store
from tests.store.conftest import pg_schema, require_postgresql


@pytest.fixture
def pg_url() -> Iterator[str]:
    require_postgresql()
    with pg_schema() as url:
        yield url


def application_name(store: Store) -> str:
    with store.read() as conn:
        return str(conn.execute(text("SELECT current_setting('application_name')")).scalar_one())


def test_corral_names_its_sessions_with_its_dispatcher_so_a_dba_can_tell_them_apart(pg_url: str) -> None:
    """Without it every corral session was a blank application_name beside psql's and the other
    applications': which dispatcher held a lock or sat idle in a transaction could not be told."""
    unnamed = make_url(pg_url).difference_update_query(["application_name"]).render_as_string(hide_password=False)
    for url, given, shown in [
        (unnamed, None, "corral"),
        (unnamed, "corral d-web-1", "corral d-web-1"),
        (pg_url, "corral d-web-1", make_url(pg_url).query["application_name"]),  # the DBA's, in store.url, wins
    ]:
        store = Store(url) if given is None else Store(url, application_name=given)
        try:
            assert application_name(store) == shown
        finally:
            store.close()
