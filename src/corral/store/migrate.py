"""Run the Alembic migrations programmatically (no alembic.ini needed by users)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, MetaData, Table, inspect, select
from sqlalchemy.exc import SQLAlchemyError

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


class OlderDispatchersRun(RuntimeError):
    """The store needs migrating, and dispatchers of the older corral that use it still heartbeat."""

    def __init__(self, current: str, head: str | None, dispatchers: list[str]) -> None:
        super().__init__(
            f"its schema is at revision {current} and this corral would migrate it to {head}, but"
            f" {'a dispatcher' if len(dispatchers) == 1 else 'dispatchers'} of the older corral still"
            f" {'runs' if len(dispatchers) == 1 else 'run'} on it ({'; '.join(dispatchers)}), which would read the"
            " newer schema as the old one: stop every older dispatcher first, then start the upgraded ones"
        )


class BrokenForeignKeys(RuntimeError):
    """SQLite's check found rows whose foreign keys point nowhere: before the migrations (a store
    written with its keys unenforced, by hand or by a tool), which then do not run; or after them,
    in their transaction, which is then rolled back."""

    def __init__(self, broken: list[tuple[str, int | None, str]], migrated: bool) -> None:
        shown = "; ".join(f"{table} row {rowid} names no {parent} row" for table, rowid, parent in broken[:5])
        more = f" and {len(broken) - 5} more" if len(broken) > 5 else ""
        done = (
            "the migrations would have left them so (a fault of this corral's): nothing was migrated, the store"
            " is as it was; run the corral you upgraded from, and report it"
            if migrated
            else "nothing was migrated: delete those rows, or restore a backup, then start again"
        )
        points = "1 row points" if len(broken) == 1 else f"{len(broken)} rows point"
        super().__init__(f"{points} nowhere ({shown}{more}); {done}")


class MigrationFailed(RuntimeError):
    """A statement of a migration failed (a table or index of the name it creates is there
    already, say). The migrations run in one transaction, rolled back: nothing of them is kept."""

    def __init__(self, current: list[str], target: str | None, reason: str) -> None:
        was = f"at revision {', '.join(current)}" if current else "empty"
        super().__init__(
            f"migrating it to revision {target} failed: {reason}; nothing was migrated, the store is {was} as"
            " before: remove the cause, then start again"
        )


@dataclass(frozen=True, slots=True)
class Starter:
    """The dispatcher about to migrate: its id, the time, and how long a silent dispatcher counts
    as running (policy.dispatch.dispatcher_stale)."""

    dispatcher_id: str
    now: float
    stale_after: float


def upgrade(engine: Engine, revision: str = "head", starter: Starter | None = None) -> None:
    """Migrates the store to `revision`. With a `starter`, refuses (OlderDispatchersRun) while
    another dispatcher that heartbeats on the store would be left running on a schema it does not
    know: a rolling upgrade of dispatchers sharing a PostgreSQL store."""
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
        target = script.get_current_head() if revision == "head" else revision
        if starter is not None and current and set(current) != {target}:
            # Any dispatcher that heartbeats here runs an older corral: one as new as this would
            # have migrated the store when it started.
            running = dispatchers_running(conn, starter)
            if running:
                raise OlderDispatchersRun(", ".join(current), target, running)
    try:
        command.upgrade(config, revision)
    except SQLAlchemyError as exc:
        interrupt = interrupt_behind(exc)
        if interrupt is not None:
            # Ctrl-C in a table rebuild: Alembic's clean-up on the connection SQLAlchemy then
            # invalidated fails ("Can't reconnect until invalid transaction is rolled back"),
            # which is no reason to give the operator.
            raise interrupt from None
        # The database's own words, without SQLAlchemy's statement dump and link to its docs.
        raise MigrationFailed(list(current), target, str(getattr(exc, "orig", None) or exc)) from exc


def interrupt_behind(exc: BaseException) -> BaseException | None:
    """The KeyboardInterrupt (or SystemExit) that `exc` was raised while handling, if any."""
    cause = exc.__context__
    while cause is not None:
        if not isinstance(cause, Exception):
            return cause
        cause = cause.__context__
    return None


def dispatchers_running(conn: Connection, starter: Starter) -> list[str]:
    """The other dispatchers that heartbeat on the store, as "ID on HOST pid PID, last heartbeat N s
    ago". Read from the schema as it is (an older one lacks `stopped_at` and `stale_at`)."""
    if not inspect(conn).has_table("dispatchers"):
        return []
    table = Table("dispatchers", MetaData(), autoload_with=conn)
    query = select(table.c.id, table.c.host, table.c.pid, table.c.last_heartbeat).where(
        table.c.id != starter.dispatcher_id, table.c.last_heartbeat > starter.now - starter.stale_after
    )
    for ended in ("stopped_at", "stale_at"):
        if ended in table.c:
            query = query.where(table.c[ended].is_(None))
    rows = conn.execute(query.order_by(table.c.id)).all()
    return [
        f"{row.id} on {row.host or '?'} pid {row.pid}, last heartbeat {max(0.0, starter.now - beat):.0f} s ago"
        for row in rows
        for beat in [row.last_heartbeat]
    ]
