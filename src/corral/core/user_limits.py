"""Per-user limits on running work, as Slurm's QOS MaxJobsPerUser and MaxTRESPerUser=cpu=N
(`policy.users`): at most so many of a user's jobs claimed or running at once, and at most so many
vCPUs held by them (a job holds its vcpus times its nodes).

`hold_back` is the pass's decision (`corral.core.reconcile.plan_pass` and
`corral.core.batch.plan_batch_pass` both take it, after a job array's throttle): the user's queued
jobs go on to be placed, in queue order, while the user's limits leave room beside what already
runs; the others wait with Slurm's reason (`QOSMaxJobsPerUserLimit`, `QOSMaxCpuPerUserLimit`) and
no instance is booted for them. Another user's jobs are not held back by them. As for an array's
throttle, a job let through counts against its user in the pass even if no node takes it; but not a
job the last pass found nothing could ever hold (`Job.unplaceable`: larger than every instance type
and node), which would otherwise hold its user's later jobs back for as long as it waits.

Pure: the caller gives the queue in order and the open jobs.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import TYPE_CHECKING

from corral.core.model import Job, JobState

if TYPE_CHECKING:
    from corral.core.settings import UserLimitSettings

JOBS_REASON = "QOSMaxJobsPerUserLimit"  # Slurm's reason words, which a Slurm user looks for
CPU_REASON = "QOSMaxCpuPerUserLimit"
_ACTIVE = (JobState.CLAIMED, JobState.RUNNING)
_SLACK = 1e-9
_COUNTED = " (running, or before this job in the queue)"


def vcpus_of(job: Job) -> float:
    return job.resources.vcpus * max(1, job.node_count)


def hold_back(
    queue: Sequence[Job], open_jobs: Iterable[Job], ended: Collection[int], settings: UserLimitSettings
) -> tuple[list[Job], dict[int, str]]:
    """The queue (in its order, of jobs that could run now) less the jobs their users' limits hold
    back, and those jobs' wait reasons. `open_jobs`: every open job; those claimed or running count
    against their users, but not the ones in `ended` (this pass ended them)."""
    if not settings.limited():
        return list(queue), {}
    jobs: dict[str, int] = {}
    vcpus: dict[str, float] = {}
    for job in open_jobs:
        if job.state in _ACTIVE and job.id not in ended:
            jobs[job.user] = jobs.get(job.user, 0) + 1
            vcpus[job.user] = vcpus.get(job.user, 0.0) + vcpus_of(job)
    kept: list[Job] = []
    held_back: dict[int, str] = {}
    for job in queue:
        if job.unplaceable:
            kept.append(job)  # it keeps its own reason, and no place among its user's jobs
            continue
        user = job.user
        limits = settings.of(user)
        who = user or "(no user)"
        most_jobs, most_vcpus = limits.max_running_jobs, limits.max_running_vcpus
        need = vcpus_of(job)
        if most_jobs is not None and jobs.get(user, 0) + 1 > most_jobs:
            jobs_text = "1 job" if most_jobs == 1 else f"{most_jobs} jobs"
            held_back[job.id] = f"{JOBS_REASON}: {who} runs at most {jobs_text} at once{_COUNTED}"
        elif most_vcpus is not None and need > most_vcpus + _SLACK:
            held_back[job.id] = f"{CPU_REASON}: it needs {need:g} vCPUs, more than {who} may hold ({most_vcpus:g})"
        elif most_vcpus is not None and vcpus.get(user, 0.0) + need > most_vcpus + _SLACK:
            held_back[job.id] = f"{CPU_REASON}: {who} holds at most {most_vcpus:g} vCPUs at once{_COUNTED}"
        else:
            jobs[user] = jobs.get(user, 0) + 1
            vcpus[user] = vcpus.get(user, 0.0) + need
            kept.append(job)
    return kept, held_back
