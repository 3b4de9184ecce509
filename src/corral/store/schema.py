"""The database schema (SQLAlchemy Core). Alembic migrations in `migrations/` create it.

Times are float epoch seconds, as everywhere in corral. A job's original request is kept whole in
`jobs.spec` (JSON), so constraints added to the request later need no new columns.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    false,
)

from corral.jobspec import MAX_NAME, MAX_TAG, MAX_USER

metadata = MetaData()

jobs = Table(
    "jobs",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(MAX_NAME), nullable=False, default=""),  # (a longer name is refused)
    Column("state", String(16), nullable=False),
    Column("priority", Integer, nullable=False),
    Column("spec", JSON, nullable=False),
    # The user the spec names (its `user`, "" for none), written with the spec, which a job's update
    # never changes: each submission counts its user's open jobs by it (policy.users.max_submitted_jobs)
    # off an index, where reading the spec's JSON of every open job took 55 ms at 100,000 (0019).
    # (Not `user`: PostgreSQL reads a bare `user` as CURRENT_USER.)
    Column("user_name", String(MAX_USER), nullable=False, default="", server_default=""),
    Column("submitted_at", Float, nullable=False),
    Column("claimed_by", String(64)),
    Column("retry_at", Float),
    Column("temp_failures", Integer, nullable=False, default=0),
    Column("perm_failures", Integer, nullable=False, default=0),
    Column("attempt_count", Integer, nullable=False, default=0),
    Column("exit_code", Integer),
    # The signal that killed its last run's command (exit_code then reads 128+N, as before 0021);
    # None: it exited, or it ended before 0021, or its node did not say (an agent of an older corral).
    Column("exit_signal", Integer),
    # Who asked for its cancel (a cancel or priority 0): the user, or CANCELLED_BY_OPERATOR for the
    # data directory's token; None: nobody did (a dependency, a node failure or Slurm ended it; 0021).
    Column("cancelled_by", String(MAX_USER)),
    Column("wait_reason", Text, nullable=False, default=""),
    Column("unplaceable", Boolean, nullable=False, default=False),
    Column("cancel_requested", Boolean, nullable=False, default=False),
    # Held (corral hold, or the node-failure policy `hold`): queued, not placed until released (0003).
    Column("held", Boolean, nullable=False, default=False, server_default=false()),
    # A claimed or running job to stop and put back in the queue, held if asked (corral requeue; 0008).
    Column("requeue_requested", Boolean, nullable=False, default=False, server_default=false()),
    Column("requeue_hold", Boolean, nullable=False, default=False, server_default=false()),
    # A task of a job array (corral submit --array): the array's id (its first task's job id), the
    # task's id, and the array's throttle, which `corral throttle` changes on every task (0010).
    Column("array_job_id", Integer),
    Column("array_task_id", Integer),
    Column("array_throttle", Integer),
    # How many times `spec` was changed after submission (corral update; 0011): a dispatcher that
    # keeps the job built from its spec builds it again when this moved.
    Column("spec_rev", Integer, nullable=False, default=0, server_default="0"),
    Column("explanation", JSON),
    Column("node_id", String(64)),
    Column("started_at", Float),
    Column("finished_at", Float),
    Column("updated_at", Float, nullable=False),
    # By state, and within a state in submission order: the oldest waiting job (Store.oldest_wait)
    # without a sort (0007; it replaced an index of the state alone).
    Index("ix_jobs_state_submitted", "state", "submitted_at", "id"),
    # An array's tasks in task order (corral jobs --array, cancel --array, throttle).
    Index("ix_jobs_array", "array_job_id", "array_task_id"),
    # A user's jobs by state: their open ones counted (Store.open_jobs_of) from the index alone.
    Index("ix_jobs_user_state", "user_name", "state"),
    # The jobs of a name, newest first: `corral jobs --name` (an exact name) reads a page of them
    # off the index, where it scanned every job (139 ms at 400,000 on PostgreSQL; 0020).
    Index("ix_jobs_name", "name", "id"),
)

# A job's dependency (Slurm's --dependency, kept whole in `jobs.spec`), one row per condition: what
# `corral job` shows of the jobs a job waits for, and of those that wait for it (0006).
job_dependencies = Table(
    "job_dependencies",
    metadata,
    Column("job_id", Integer, ForeignKey("jobs.id"), primary_key=True),
    Column("kind", String(16), primary_key=True),  # after, afterany, afterok, afternotok
    Column("depends_on", Integer, ForeignKey("jobs.id"), primary_key=True),
    Index("ix_job_dependencies_depends_on", "depends_on"),
)

# A job's tags (its spec's `tags`, which no update changes), one row each, written with the job and
# deleted with it: `corral jobs --tag` (and cancel --tag) finds a tag's jobs off the index, where it
# read the tags in the spec of every job (1.7 s at 400,000 on PostgreSQL; 0020).
job_tags = Table(
    "job_tags",
    metadata,
    Column("job_id", Integer, ForeignKey("jobs.id"), primary_key=True),
    Column("tag", String(MAX_TAG), primary_key=True),
    Index("ix_job_tags_tag", "tag", "job_id"),
)

attempts = Table(
    "attempts",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job_id", Integer, ForeignKey("jobs.id"), nullable=False),
    Column("node_id", String(64), nullable=False),  # the node that runs the command
    Column("node_ids", JSON, nullable=False),  # the whole gang, first = node_id
    Column("vcpus", Float, nullable=False),
    Column("ram_mib", Integer, nullable=False),
    Column("scratch_mib", Integer, nullable=False),
    Column("gpus", Integer, nullable=False),
    Column("state", String(16), nullable=False),
    Column("dispatcher_id", String(64)),
    Column("assigned_at", Float, nullable=False),
    Column("started_at", Float),
    Column("finished_at", Float),
    Column("exit_code", Integer),
    Column("exit_signal", Integer),  # the signal that killed its command (exit_code: 128+N); None: it exited (0021)
    Column("pid", Integer),
    Column("reason", Text, nullable=False, default=""),
    Column("executor_ref", String(64)),  # the executor's id of it: the Slurm job id (None: the agent)
    # What the run used on the node that ran its command, as its agent measured it (Slurm's TotalCPU
    # and MaxRSS): CPU seconds, user and system, and peak RSS in MiB. None: not known (an older agent,
    # Slurm, a lost node, a run before 0022).
    Column("cpu_seconds", Float),
    Column("max_rss_mib", Integer),
    Index("ix_attempts_job", "job_id"),
    Index("ix_attempts_state", "state"),
    Index("ix_attempts_node", "node_id"),
    # By their end: the attempts running in the last minutes (those not ended, and those ended
    # since), which fair share charges each pass, without reading every attempt ever made (0020).
    Index("ix_attempts_finished", "finished_at"),
)

nodes = Table(
    "nodes",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("instance_id", String(128)),
    Column("instance_type", String(64), nullable=False),
    Column("state", String(16), nullable=False),
    Column("vcpus", Float, nullable=False),
    Column("ram_mib", Integer, nullable=False),
    Column("scratch_mib", Integer, nullable=False),
    Column("gpus", Integer, nullable=False),
    Column("price_per_hour", Float, nullable=False),
    Column("billing_granularity", Float, nullable=False),
    Column("billing_minimum", Float, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("paired_at", Float),
    Column("last_ping_at", Float),
    Column("state_changed_at", Float, nullable=False),
    Column("used_vcpus", Float, nullable=False, default=0.0),
    Column("used_ram_mib", Integer, nullable=False, default=0),
    Column("used_at", Float),
    Column("attributes", JSON, nullable=False),
    Column("rack", String(64), nullable=False, default=""),
    Column("reason", Text, nullable=False, default=""),
    Column("boot_token_hash", String(64)),
    Column("secret_hash", String(64)),
    Column("hostname", String(255)),
    Column("gone_at", Float),
    Column("dispatcher_id", String(64)),  # the dispatcher that booted it (None: booted before 0002)
    # Where its instance runs, as the cloud says (None: a cloud without zones or markets, loopback).
    Column("zone", String(64)),  # EC2's availability zone
    Column("market", String(16)),  # "spot" or "on-demand"
    # The corral version its agent told at pairing or its latest resume (None: not paired yet, or
    # its agent is of a corral that did not tell; 0017).
    Column("agent_version", String(32)),
    Index("ix_nodes_state", "state"),
    Index("ix_nodes_secret", "secret_hash"),
)

dispatchers = Table(
    "dispatchers",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("started_at", Float, nullable=False),
    Column("last_heartbeat", Float, nullable=False),
    Column("host", String(255), nullable=False, default=""),
    Column("pid", Integer),
    Column("stopped_at", Float),  # when it stopped cleanly (None: it runs, or it crashed)
    Column("stale_at", Float),  # when a peer judged it silent (None: it was not, or heartbeats since)
)

events = Table(
    "events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("at", Float, nullable=False),
    Column("kind", String(32), nullable=False),
    Column("job_id", Integer),
    Column("node_id", String(64)),
    Column("message", Text, nullable=False, default=""),
    Index("ix_events_job", "job_id"),
    Index("ix_events_node", "node_id"),
    Index("ix_events_kind", "kind"),
)

unavailable_types = Table(
    "unavailable_types",
    metadata,
    Column("instance_type", String(64), primary_key=True),
    Column("until", Float, nullable=False),
    Column("reason", Text, nullable=False, default=""),
    # The type's failed boots in a row (instances that did not pair within the boot grace) and when
    # the last was: its next failure's back-off grows from them (corral.core.capacity; 0013).
    Column("boot_failures", Integer, nullable=False, default=0, server_default="0"),
    Column("boot_failed_at", Float),
)

# Facts about the store itself; `store_id`: a random id made when first asked for, which tags the
# instances this store's dispatchers boot, so that a corral on another store that shares the cloud
# and `cloud.cluster` is told apart from an orphan (0009).
store_meta = Table(
    "store_meta",
    metadata,
    Column("name", String(32), primary_key=True),
    Column("value", Text, nullable=False),
)

# The notifier's place in the events (corral.notifier): the last event it handled and the rearm
# state of its rules. One row, shared by the dispatchers of a store, so that each event is notified
# once, by whichever dispatcher reads it first.
notify_cursor = Table(
    "notify_cursor",
    metadata,
    Column("name", String(32), primary_key=True),
    Column("last_event_id", Integer, nullable=False),
    Column("state", JSON, nullable=False),
    Column("updated_at", Float, nullable=False),
)

# The users that hold a token of their own (0016): each may submit, and change only their own jobs;
# an admin may do what the data directory's `token` does. Only the token's sha256 is kept: the token
# is shown once, when the user is added.
users = Table(
    "users",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("token_hash", String(64), nullable=False, unique=True),
    Column("admin", Boolean, nullable=False, default=False),
    Column("created_at", Float, nullable=False),
    Column("last_used_at", Float),
)

# Submissions by the key their client gave (0018): a submission sent again with its key (its answer
# was lost: a dropped connection, a 503 from a store outage after the commit) answers the jobs it
# queued the first time instead of queuing them twice. Kept a day (submission.KEY_KEPT_FOR).
submissions = Table(
    "submissions",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("body_hash", String(64), nullable=False),  # sha256 of what was submitted: a key reused for other jobs
    Column("job_ids", JSON, nullable=False),
    Column("at", Float, nullable=False),
    Index("ix_submissions_at", "at"),
)

# Signals asked for a running attempt (scancel --signal, `corral cancel --signal`) and not yet sent
# (0023): its agent is handed each in its ping answers until it says it sent it (or a Slurm pass runs
# scancel --signal), and the row goes, with a job.signalled event; one whose attempt ended first goes
# with a job.signal_dropped event. Kept in the store so that a request outlives a server restart.
signal_requests = Table(
    "signal_requests",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("attempt_id", Integer, ForeignKey("attempts.id"), nullable=False),
    Column("job_id", Integer, ForeignKey("jobs.id"), nullable=False),
    Column("number", Integer, nullable=False),
    Column("main_only", Boolean, nullable=False),  # scancel --batch: the main process alone
    Column("requested_at", Float, nullable=False),
    Column("requested_by", String(MAX_USER), nullable=False),
    Index("ix_signal_requests_attempt", "attempt_id"),
    Index("ix_signal_requests_job", "job_id"),
)
