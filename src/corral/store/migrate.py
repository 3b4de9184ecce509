"""Run the Alembic migrations programmatically (no alembic.ini needed by users)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

MIGRATIONS = Path(__file__).parent / "migrations"


def alembic_config(engine: Engine) -> AlembicConfig:
    config = AlembicConfig()
    config.set_main_option("script_location", str(MIGRATIONS))
    # The config is a ConfigParser: a literal "%" (a percent-encoded password or `options=-c...%3D...`)
    # must be doubled, or setting the option raises "invalid interpolation syntax".
    url = engine.url.render_as_string(hide_password=False)
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    config.attributes["engine"] = engine
    return config


class StoreTooNew(RuntimeError):
    """The store's schema is at a revision this corral does not know: a newer corral migrated it."""

    def __init__(self, revisions: list[str], head: str | None) -> None:
        super().__init__(
            f"its schema is at revision {', '.join(revisions)}, which this corral does not know (its newest is"
            f" {head}): run the newer corral, or restore a backup taken before the upgrade"
        )


def upgrade(engine: Engine, revision: str = "head") -> None:
    config = alembic_config(engine)
    script = ScriptDirectory.from_config(config)
    with engine.connect() as conn:
        current = MigrationContext.configure(conn).get_current_heads()
    known = {rev.revision for rev in script.walk_revisions()}
    # Alembic would refuse with "Can't locate revision identified by '0012'" and a traceback: an
    # older corral started on a store an upgrade migrated (a roll back) must say so and stop.
    unknown = sorted(set(current) - known)
    if unknown:
        raise StoreTooNew(unknown, script.get_current_head())
    command.upgrade(config, revision)
