"""Every kind of event corral records (`corral events`, `[[notify]] on`), with what it means.

The store writes no other kind (tests/test_docs.py checks the source and the operator guide's
table against this), so a `[[notify]]` rule whose `on` matches none of them is a typo that would
never fire: the config refuses it.
"""

from __future__ import annotations

EVENT_KINDS: dict[str, str] = {
    # jobs
    "job.queued": "submitted (or an array task created)",
    "job.claimed": "a dispatcher assigned an attempt to nodes",
    "job.submitted": "in front of Slurm: the attempt was sbatched",
    "job.running": "the attempt started",
    "job.complete": "exited 0",
    "job.failed": "exited non-zero with no retry left, or infrastructure failed too often",
    "job.timeout": "failed: ran past its time limit (TIMEOUT)",
    "job.cancelled": "cancelled (a cancel, priority 0, a dependency never satisfied,"
    " a lost node under on_node_failure = cancel)",
    "job.cancel_requested": "a cancel was asked for",
    "job.requeued": "queued again (a temporary failure, a requeue, a lost node)",
    "job.requeue_requested": "a requeue was asked for",
    "job.signal_requested": "a signal was asked for its running command (corral cancel --signal), not yet sent",
    "job.signalled": "a signal asked for was sent to its running command (which goes on, unless it dies of it)",
    "job.signal_dropped": "a signal asked for was not sent: its run ended first, or Slurm refused it",
    "job.held": "held (corral hold, or a lost node under on_node_failure = hold)",
    "job.released": "a hold was released",
    "job.priority": "its priority was set",
    "job.updated": "what it asked for was changed (corral update)",
    "job.array_throttle": "its array's throttle was changed (corral throttle)",
    "job.unplaceable": "no instance type can hold it",
    # nodes
    "node.booting": "an instance was booted",
    "node.paired": "its agent paired",
    "node.agent_restarted": "its agent started again (it died, or was restarted) and resumed with its saved"
    " credentials; the runs it lost end as on a lost node (*When a node fails*)",
    "node.attempt_lost": "its agent stopped listing an attempt corral had running there (neither running nor"
    " finished, ping after ping): the attempt ends as on a lost node (*When a node fails*)",
    "node.idle": "it has no work",
    "node.busy": "it has work",
    "node.draining": "it takes no new work and is shut down once empty",
    "node.down": "silent past ping_stale, broken, drained or retired: it is shut down",
    "node.shutting_down": "its instance is being terminated",
    "node.gone": "its instance is gone",
    "node.orphan": "an instance with no live node record was destroyed, or its terminate failed",
    "node.attributes": "an operator's memo changed (corral node)",
    "node.scratch_short": "its work dir has less free than its type's scratch",
    "node.health_check": "its health check failed, or passed again",
    "node.interruption": "a spot interruption notice came: it is drained",
    "node.transient_failure": "it did not start an attempt in time: reserved (node_failure_reserve_time)",
    # the fleet, the dispatchers, Slurm, the notifier
    "capacity.unavailable": "an instance type is backed off after a capacity or quota error",
    "capacity.interruption": "a spot interruption notice came: the instance type is backed off"
    " (interruption_backoff), its spot capacity being short",
    "type.image_unusable": "an instance type's AMI cannot boot: the type is backed off",
    "type.unusable": "the cloud refuses an instance type as configured (an unknown name): the type is backed off",
    "type.boot_failed": "an instance did not pair within boot_grace (a broken image, agent or network): its type is"
    " backed off, longer at each failure in a row",
    "type.backoff_cleared": "an operator ended an instance type's back-off (corral backoff clear): it may boot at once",
    "cloud.foreign": "an instance of this cloud.cluster booted by another corral store, left alone",
    "dispatcher.registered": "a dispatcher started on the store",
    "dispatcher.restarted": "a dispatcher restarted with the same data directory",
    "dispatcher.stopped": "a dispatcher stopped cleanly (Ctrl-C, SIGTERM), with what it left behind",
    "dispatcher.stale": "a peer judged a dispatcher silent (no heartbeat for dispatch.dispatcher_stale): its claims"
    " are released (in front of Slurm, those Slurm still knows are adopted)",
    "dispatcher.resumed": "a dispatcher judged silent heartbeats again (it had been paused)",
    "slurm.unreachable": "squeue failed: passes change nothing; or a clean stop could not scancel its Slurm jobs,"
    " which it left to the next corral",
    "slurm.reachable": "squeue answers again",
    "slurm.orphan": "a Slurm job of an attempt corral ended was scancelled",
    "slurm.id_reused": "the Slurm job id recorded on an attempt names another job now (slurmctld lost its state"
    " and gave the id out again): the attempt is taken as no longer listed by Slurm",
    "slurm.adopted": "a dispatcher took over a silent one's attempt that Slurm still knows: it follows it to its end,"
    " and does not run it again",
    "slurm.reniced": "a priority change reached a pending Slurm job as its Nice",
    "slurm.renice_failed": "Slurm refused a Nice",
    "notify.failed": "a notification's action failed",
    "notify.moved": "the notifier's cursor was moved (corral notify skip)",
    "store.purged": (
        "a batch of ended jobs past `retention.jobs_after` was deleted, with their attempts and output"
        " (*Keeping and deleting what has ended*)"
    ),
    "user.added": "a user was given a token of their own (corral users add)",
    "user.removed": "a user was removed (corral users remove): their token is refused",
}


def matching_kinds(on: str) -> list[str]:
    """The kinds an `on` entry (or `corral events --kind`) matches: '*' all, else those it starts."""
    return [kind for kind in EVENT_KINDS if on == "*" or kind.startswith(on)]
