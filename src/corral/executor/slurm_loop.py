"""The control loop in front of Slurm (`executor = "slurm"`): corral as crunch-dispatch-slurm.

Slurm owns the nodes; corral boots nothing and runs no agents. A pass: heartbeat; list Slurm's
jobs (`squeue`), and read the exit codes of corral's ended ones (`scontrol show job`); load the
snapshot; ask the core (`corral.core.batch.plan_batch_pass`); carry its decisions out: record
outcomes, exits and starts, `scancel`, claim queued jobs through the store's atomic claim and
`sbatch` them. Each Slurm job carries corral's ids in its comment, so a restarted dispatcher finds
its jobs again instead of submitting them twice, and a Slurm job of this cluster whose attempt
corral no longer runs (a cancel that failed, a stale dispatcher's released claim) is scancelled.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import shutil
import socket
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from corral.batch_script import write_script
from corral.config import Config
from corral.core import batch, job_array, retry
from corral.core.batch import CHDIR_FAILED_EXIT, Phase, Seen, phase_of
from corral.core.dispatchers import stale_dispatchers
from corral.core.model import Attempt, AttemptState, Job
from corral.core.snapshot import Decisions, Snapshot
from corral.executor.slurm import (
    BATCH_SCRIPT,
    CHDIR_VARIABLE,
    KILLED_TAIL_BYTES,
    SBATCH_PASSED,
    SEPARATE_STDERR_VARIABLE,
    SIGNAL_VARIABLE,
    STATUS_SUFFIX,
    Slurm,
    SlurmError,
    SlurmJob,
    comment_for,
    job_name,
    job_signal,
    killed_state,
    parse_exit_status,
    sbatch_environment,
    sbatch_variable_refusal,
    signal_options,
)
from corral.loop import LiveLoop, PassReport
from corral.server.logstore import STREAMS, LogStore, Stream, cut_note
from corral.store import AttemptUsage, Store

log = logging.getLogger("corral.slurm")

# The node an attempt is recorded on: Slurm places it (the job's node column then shows Slurm's
# node list, "slurm:c[1-2]").
SLURM_NODE = "slurm"
# How long after corral ended a running attempt (scancel) its batch script's status is looked for:
# Slurm's KillWait (30 s by default) and a shared file system's delay, with room to spare.
LATE_STATUS_WAIT = 300.0
# Not handed on to a job's environment: corral's own credentials and addresses.
PRIVATE_ENV = ("CORRAL_TOKEN", "CORRAL_URL", "CORRAL_BOOT_TOKEN", "CORRAL_AGENT_SECRET")


class SlurmLoop(LiveLoop):
    """The live loop (run_pass, shutdown_fleet) over Slurm instead of a cloud."""

    def __init__(
        self,
        store: Store,
        config: Config,
        dispatcher_id: str,
        log_root: Path,
        clock: Callable[[], float] = time.time,
        slurm: Slurm | None = None,
    ) -> None:
        super().__init__(store, config, dispatcher_id, clock)
        settings = config.slurm
        self.slurm = slurm or Slurm(settings.bin_dir, settings.conf, settings.command_timeout)
        self.cluster = config.cloud.cluster
        # Absolute: Slurm reads a relative --output from the job's working directory, not from
        # corral's (`corral run --home data` failed every job at launch, with no output).
        log_root = log_root.absolute()
        self.logs = LogStore(log_root)  # where `corral logs` reads an attempt's output
        self.output_dir = Path(settings.output_dir or log_root).absolute()
        self.work_dir = Path(settings.work_dir or config.home / "slurm" / "work").absolute()
        self.script = config.home / "slurm" / "corral-batch.sh"
        self.script.parent.mkdir(parents=True, exist_ok=True)
        self.script.write_text(BATCH_SCRIPT)
        self._unreachable = ""  # Slurm's last error while it cannot be asked, to record it once
        self._renice_refused: dict[str, int] = {}  # Slurm job id -> the Nice Slurm refused it, to record it once
        # Slurm job id -> the Nice this process gave it (sbatch, renice): a pending job found with
        # another was reniced outside corral (`scontrol update JobId=.. Nice=..`), which the event
        # says. Not known after a restart: the renice is then recorded as any other.
        self._nice_given: dict[str, int] = {}
        # Attempt id -> the Slurm job id recorded on it that names another job now, to say so once.
        self._reused: dict[int, str] = {}
        # Attempts corral ended while their Slurm job ran (a cancel, a requeue, a time limit) -> their
        # job id, Slurm job id and when to stop looking: the batch script writes its status, with
        # what the command used, only once Slurm's kill has ended the command (`_read_late_statuses`).
        # Not known after a restart: such a file then stays beside the job's output.
        self._ended_running: dict[int, tuple[int, str, float]] = {}

    # ---- a pass -------------------------------------------------------------------------------

    def _run_pass(self) -> PassReport:
        started = self.clock()
        self.store.heartbeat(self.dispatcher_id, started, socket.gethostname(), os.getpid())
        decisions = self._follow(started, submit=True)
        if decisions is None:
            return PassReport(Decisions(), duration=self.clock() - started)
        report = PassReport(Decisions(job_outcomes=decisions.job_outcomes))
        report.duration = self.clock() - started
        return report

    def _follow(self, started: float, submit: bool) -> batch.BatchDecisions | None:
        """List Slurm's jobs, ask the core what they mean, and carry it out; None while squeue
        fails. `submit`: also claim queued jobs and sbatch them (not in a clean stop's last look)."""
        try:
            listing = self.slurm.squeue()
        except SlurmError as exc:
            self._slurm_unreachable(str(exc), started)
            return None
        if self._unreachable:
            self.store.add_event(started, "slurm.reachable", "squeue answers again")
            self._unreachable = ""
        ours: dict[int, SlurmJob] = {}  # this cluster's Slurm jobs, by attempt id
        by_ref = {slurm_job.id: slurm_job for slurm_job in listing}
        for slurm_job in listing:
            ids = slurm_job.corral_ids(self.cluster)
            if ids is not None:
                ours[ids[1]] = slurm_job
        snapshot = self.store.load_snapshot(self.dispatcher_id, [], self.observing_since)
        now = self.clock()
        self.fill_usage(snapshot, now)
        self.tell_silent_dispatchers(snapshot, now)
        # This dispatcher's attempts, and those of the peers that stopped heartbeating, which the
        # core adopts where Slurm still knows them (a store keeps every dispatcher that ever ran:
        # only the silent ones that hold an attempt are asked about).
        # No PauseWatch here, unlike ControlLoop (corral.loop): a pause of this process (GC, VM,
        # SIGSTOP) makes none of this loop's judgements wrong. The agent path judges nodes by
        # pings this process's server receives, which a pause holds back; here, what became of a
        # job and its nodes is asked of slurmctld each pass (squeue, never inferred from silence),
        # time limits are Slurm's to enforce, and the only judgement by elapsed time is this one,
        # of peers, by heartbeats each peer writes to the store itself, which this process's
        # pause does not hold back (a peer paused with it, on the same VM, may be judged silent:
        # its Slurm jobs are then adopted and followed, never run twice, as for any silence). The
        # peers' judgement of this one, silent while paused, is right, and what this one does on
        # resuming from a stale view is guarded: its sbatch by holds_unsubmitted, its adoptions
        # by adopt_attempt's transaction.
        stale = stale_dispatchers(snapshot, now, self.config.policy)
        followed = {self.dispatcher_id, *(a.dispatcher_id for a in snapshot.attempts if a.dispatcher_id in stale)}
        seen = self._observe(snapshot, followed, ours, by_ref, now)
        settings = self.config.slurm
        decisions = batch.plan_batch_pass(
            snapshot, now, self.config.policy, seen, settings.max_pending, settings.nice_base
        )
        if not submit:
            # A stop records what Slurm did since the last pass, and sends Slurm nothing new (it
            # requeues an attempt claimed but not submitted yet); queued jobs keep their reasons.
            # It adopts no silent peer's attempts either: it would scancel them and requeue them
            # with its own; they are left to a peer that runs on.
            decisions = dataclasses.replace(decisions, submit=[], claims=[], annotations=[], renice=[], adoptions=[])
        self._orphans(snapshot, ours, now)
        self._execute(decisions, snapshot, seen, now)
        return decisions

    def _slurm_unreachable(self, message: str, now: float) -> None:
        if message != self._unreachable:
            log.warning("squeue failed: %s", message)
            self.store.add_event(now, "slurm.unreachable", f"squeue failed: {message}")
        self._unreachable = message

    def _observe(
        self,
        snapshot: Snapshot,
        followed: set[str],
        ours: dict[int, SlurmJob],
        by_ref: dict[str, SlurmJob],
        now: float,
    ) -> dict[int, Seen]:
        """What Slurm says of each active attempt of the dispatchers `followed` (this one, and the
        peers judged silent) that was submitted, found by the Slurm job id recorded on it. An
        attempt whose Slurm id was never recorded (a stop between sbatch and the record) is
        re-adopted by the ids in its Slurm job's comment (an adopted attempt's comment names the
        dispatcher that submitted it)."""
        refs: dict[int, str] = {}
        for dispatcher_id in followed:
            refs.update(self.store.executor_refs(dispatcher_id))
        seen: dict[int, Seen] = {}
        for attempt in snapshot.attempts:
            if attempt.dispatcher_id not in followed:
                continue
            ref = refs.get(attempt.id)
            if ref is None:
                slurm_job = ours.get(attempt.id)
                if slurm_job is None:
                    # Never submitted, unless its Slurm job ran and was forgotten before corral
                    # recorded its id (a stop between sbatch and the record, longer than MinJobAge).
                    status = self._exit_status(attempt.job_id, attempt.id)
                    if status is not None:
                        seen[attempt.id] = Seen(attempt.id, status.slurm_job, "", status=status)
                        said = (
                            f"attempt {attempt.id} re-adopted as slurm job {status.slurm_job} by its exit status file"
                        )
                        self.store.set_executor_ref(attempt.id, status.slurm_job, said, now)
                    continue
                ref = slurm_job.id
                self.store.set_executor_ref(attempt.id, ref, f"attempt {attempt.id} re-adopted as slurm job {ref}", now)
            else:
                slurm_job = by_ref.get(ref)
                if slurm_job is not None and not slurm_job.runs(self.cluster, attempt.job_id, attempt.id):
                    # Not this attempt's job: following it would take another job's state (and
                    # scancel, renice it) for this one's. What became of this one is what Slurm no
                    # longer listing it means: its exit status file, or lost.
                    self._id_reused(attempt, slurm_job, now)
                    slurm_job = None
            if slurm_job is None:
                # Slurm forgot it (MinJobAge): what its batch script recorded at its exit, if anything.
                seen[attempt.id] = Seen(attempt.id, ref, "", status=self._exit_status(attempt.job_id, attempt.id))
            else:
                seen[attempt.id] = Seen(
                    attempt.id,
                    ref,
                    slurm_job.state,
                    reason=slurm_job.reason,
                    nodes=slurm_job.nodes,
                    nice=slurm_job.nice,
                    started_at=slurm_job.start,
                    ended_at=slurm_job.end,
                )
        ended = [s for s in seen.values() if phase_of(s.state) is Phase.EXITED]
        if ended:
            try:
                codes = self.slurm.show_jobs()
            except SlurmError as exc:
                log.warning("scontrol show job failed: %s", exc)
                codes = {}
            for s in ended:
                if s.ref in codes:
                    shown = codes[s.ref]
                    exit_signal = shown.exit_signal
                    seen[s.attempt_id] = dataclasses.replace(s, exit_code=shown.exit_code, exit_signal=exit_signal)
                else:  # no exit code this pass: wait for one (Slurm keeps the job for MinJobAge)
                    seen[s.attempt_id] = dataclasses.replace(s, state="COMPLETING")
        return seen

    def _id_reused(self, attempt: Attempt, slurm_job: SlurmJob, now: float) -> None:
        """Record, once per attempt, that its recorded Slurm job id names another job now."""
        if self._reused.get(attempt.id) == slurm_job.id:
            return
        self._reused[attempt.id] = slurm_job.id
        ids = slurm_job.corral_ids(self.cluster)
        other = f"corral job {ids[0]} attempt {ids[1]}" if ids else "a job of another corral or Slurm user"
        message = (
            f"slurm job {slurm_job.id}, recorded for attempt {attempt.id}, is now {other} ({slurm_job.state});"
            " slurmctld lost its state and gave the id out again: the attempt is taken as no longer listed by Slurm"
        )
        log.warning("%s", message)
        self.store.add_event(now, "slurm.id_reused", message, job_id=attempt.job_id)

    def _exit_status(self, job_id: int, attempt_id: int) -> batch.ExitStatus | None:
        """The exit status corral's batch script recorded for an attempt, or None: no file (the
        script was killed, or the output directory is not shared with this host), or not one."""
        path = self.status_path(job_id, attempt_id)
        try:
            text = path.read_text()
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning(
                "reading the exit status of job %s from %s failed: %s", job_id, path, exc, extra={"job_id": job_id}
            )
            return None
        status = parse_exit_status(text)
        if status is None:
            log.warning(
                "the exit status file %s of job %s is not one corral wrote: %r",
                path,
                job_id,
                text[:200],
                extra={"job_id": job_id},
            )
        elif status.signal:
            # Slurm killed it: why (time limit, scancel, preemption) is slurmstepd's last word in its output.
            killed = killed_state(self._output_tail(job_id, attempt_id), status.slurm_job)
            status = dataclasses.replace(status, killed_as=killed)
        return status

    def _output_tail(self, job_id: int, attempt_id: int) -> str:
        """The end of an attempt's output as Slurm wrote it, and of its stderr kept apart, where
        slurmstepd then writes its lines (--error) ("" for what cannot be read)."""
        tails = []
        for stream in STREAMS:
            try:
                with self.output_path(job_id, attempt_id, stream).open("rb") as output:
                    output.seek(0, os.SEEK_END)
                    output.seek(max(0, output.tell() - KILLED_TAIL_BYTES))
                    tails.append(output.read().decode(errors="replace"))
            except OSError:
                continue
        return "\n".join(tails)

    def _forget_attempt_files(self, job_id: int, attempt_ids: Iterable[int]) -> None:
        """Remove the exit status files of attempts corral has ended (they were only needed while
        Slurm might forget the job before corral saw it end), and their batch scripts' copies."""
        for attempt_id in attempt_ids:
            try:
                self.status_path(job_id, attempt_id).unlink(missing_ok=True)
            except OSError as exc:
                log.warning("removing the exit status file of job %s failed: %s", job_id, exc, extra={"job_id": job_id})
            self._forget_script(attempt_id)

    def _read_late_statuses(self, now: float) -> None:
        """What the commands of attempts corral ended used, from the status files their batch
        scripts write once Slurm's kill ends them (the agent's keeper reports the same): recorded
        on the attempt, and the file removed, as for any end. One not written by LATE_STATUS_WAIT
        (the script SIGKILLed, a node lost) is given up."""
        for attempt_id, (job_id, ref, until) in list(self._ended_running.items()):
            status = self._exit_status(job_id, attempt_id)
            if status is not None and status.slurm_job == ref:
                if status.cpu_seconds is not None:
                    self.store.record_late_usage(attempt_id, AttemptUsage(cpu_seconds=status.cpu_seconds))
                self._forget_attempt_files(job_id, (attempt_id,))
            elif now < until:
                continue
            del self._ended_running[attempt_id]

    def _forget_script(self, attempt_id: int) -> None:
        # (No directory for an attempt of a job without a script: nothing to remove.)
        shutil.rmtree(self.script_dir(attempt_id), ignore_errors=True)

    def _orphans(self, snapshot: Snapshot, ours: dict[int, SlurmJob], now: float) -> None:
        """scancel this cluster's Slurm jobs that still run or wait although corral no longer runs
        their attempt (its cancel's scancel failed, or a stale dispatcher's claim was released).
        squeue ran before the snapshot was read, and an attempt is created before its sbatch, so a
        listed job whose attempt is not active has ended in corral."""
        active = {a.id for a in snapshot.attempts}
        # COMPLETING: the job has ended and Slurm is cleaning its nodes up; nothing to scancel. A
        # job corral itself scancelled shows so to the pass right after (squeue: CANCELLED with
        # the COMPLETING flag), and was reported as an orphan after every `corral cancel`.
        orphans = [
            (attempt_id, j)
            for attempt_id, j in ours.items()
            if attempt_id not in active
            and phase_of(j.state) in batch.ACTIVE
            and batch.base_state(j.state) != "COMPLETING"
        ]
        if not orphans:
            return
        refs = [j.id for _, j in orphans]
        try:
            self.slurm.scancel(refs)
        except SlurmError as exc:
            log.warning("scancel of orphan slurm jobs %s failed: %s", ", ".join(refs), exc)
            return
        for attempt_id, j in orphans:
            ids = j.corral_ids(self.cluster)
            self.store.add_event(
                now,
                "slurm.orphan",
                f"slurm job {j.id} runs attempt {attempt_id}, which corral ended; scancelled",
                job_id=ids[0] if ids else None,
            )

    def _execute(self, decisions: batch.BatchDecisions, snapshot: Snapshot, seen: dict[int, Seen], now: float) -> None:
        for adoption in decisions.adoptions:
            said = f"slurm job {adoption.ref} {adoption.state}" if adoption.state else f"slurm job {adoption.ref}"
            if not adoption.state:
                said += " (Slurm no longer lists it; its exit status file says how it ended)"
            message = (
                f"attempt {adoption.attempt_id} of dispatcher {adoption.stale}, which stopped heartbeating, is adopted"
                f" by dispatcher {self.dispatcher_id}: {said}; followed to its end, not run again"
            )
            if self.store.adopt_attempt(
                adoption.attempt_id, adoption.job_id, adoption.stale, self.dispatcher_id, message, now
            ):
                log.info("%s", message)
        self.store.apply_outcomes(decisions.job_outcomes, now, decisions.outcome_times)
        for outcome in decisions.job_outcomes:  # once their ends are committed
            self._forget_attempt_files(outcome.job_id, (i for i in outcome.attempt_ids if i in seen))
            for attempt_id in outcome.attempt_ids:
                if attempt_id in seen:
                    self._tell_cut_output(outcome.job_id, attempt_id)
                    self._ended_running[attempt_id] = (outcome.job_id, seen[attempt_id].ref, now + LATE_STATUS_WAIT)
        self._read_late_statuses(now)
        if decisions.cancel:
            try:
                self.slurm.scancel(decisions.cancel)
            except SlurmError as exc:  # the next pass scancels them as orphans
                log.warning("scancel %s failed: %s", ", ".join(decisions.cancel), exc)
        pending = {observed.ref for observed in seen.values()}
        self._nice_given = {ref: nice for ref, nice in self._nice_given.items() if ref in pending}
        self._renice(decisions.renice, now)
        # Starts before exits: a Slurm job that ran between two passes is recorded as started first.
        # Each at Slurm's own time (its event too, as an agent's exit is at the agent's time): the
        # events are listed in the order they were recorded, not by time.
        for running in decisions.started:
            where = f"slurm:{running.nodes}" if running.nodes else SLURM_NODE
            message = f"attempt {running.attempt_id} runs as slurm job {running.ref} on {running.nodes or '?'}"
            if not running.by_slurm:
                message += " (Slurm gave no StartTime: recorded at the pass that saw it)"
            self.store.attempt_started(running.attempt_id, SLURM_NODE, None, running.at, ran_on=where, message=message)
        for ended in decisions.exits:
            self._collect_output(ended.job_id, ended.attempt_id)
            # The script's word on the run, before the file is forgotten below: what its command
            # used (the batch script measures it: corral reads no accounting), and an exit of its
            # own (the job's directory it could not enter). Only the file this very Slurm job wrote.
            status = self._exit_status(ended.job_id, ended.attempt_id)
            observed = seen.get(ended.attempt_id)
            if status is not None and (observed is None or status.slurm_job != observed.ref):
                status = None
            used = AttemptUsage(cpu_seconds=status.cpu_seconds) if status is not None else None
            if ended.exit_code != CHDIR_FAILED_EXIT:
                status = None

            def outcome_of(
                job: Job, ended: batch.Exit = ended, status: batch.ExitStatus | None = status
            ) -> batch.JobOutcome:
                detail = "; ".join(d for d in (batch.chdir_failure(job, status), ended.detail) if d)
                return batch.exit_outcome(
                    job, ended.exit_code, ended.attempt_id, detail, ended.timeout, ended.exit_signal
                )

            self.store.finish_attempt(
                ended.attempt_id, SLURM_NODE, ended.exit_code, now, outcome_of, ended.at, ended.exit_signal, used=used
            )
            self._forget_attempt_files(ended.job_id, (ended.attempt_id,))
        self._send_signals(now)
        self.store.set_claimed_wait_reasons(decisions.pending_reasons, now)
        self.store.annotate_many(decisions.annotations, {}, now)
        jobs = {job.id: job for job in snapshot.jobs}
        attempts = {a.id: a for a in snapshot.attempts}
        for attempt_id in decisions.submit:
            attempt = attempts[attempt_id]
            if not self._submit(jobs[attempt.job_id], attempt.id, now):
                return  # the claims wait for the next pass too, queued with their reasons
        for job_id in decisions.claims:
            job = jobs[job_id]
            claimed = self.store.claim(job.id, self.dispatcher_id, (SLURM_NODE,), job.resources, now)
            if claimed is not None and not self._submit(job, claimed, now):
                return

    def _send_signals(self, now: float) -> None:
        """The signals asked for this dispatcher's running attempts (`corral cancel --signal`), each
        sent once with `scancel --signal=SIG --full` (the batch script and every process under it:
        corral's whole process group; corral's jobs run no steps of their own). One Slurm refuses
        (the job ended meanwhile), or whose attempt ended first, is dropped saying why: sent at
        most once here, as scancel gives no way to tell a refusal from a signal sent twice."""
        self.store.drop_ended_signals(now)  # (as the agents' control loop does each pass)
        for request, state, ref, dispatcher_id in self.store.signals_pending():
            if dispatcher_id != self.dispatcher_id or state != AttemptState.RUNNING.value or ref is None:
                continue  # another dispatcher's or an agent's; or one ended since, dropped by the next pass
            try:
                self.slurm.signal(ref, request.number)
            except SlurmError as exc:
                log.warning("scancel --signal of slurm job %s failed: %s", ref, exc)
                self.store.drop_signals([request], f"scancel --signal of slurm job {ref} failed: {exc}", now)
                continue
            self.store.signals_sent({request.id: f"slurm job {ref} (scancel --full)"}, now)

    def _renice(self, renices: list[batch.Renice], now: float) -> None:
        """`scontrol update` each Nice; a refusal (an unprivileged user's negative Nice) is recorded
        once per Slurm job and Nice, and tried again each pass while the Nice still differs."""
        wanted = {renice.ref for renice in renices}
        self._renice_refused = {ref: nice for ref, nice in self._renice_refused.items() if ref in wanted}
        for renice in renices:
            try:
                self.slurm.renice(renice.ref, renice.nice)
            except SlurmError as exc:
                if self._renice_refused.get(renice.ref) != renice.nice:
                    self._renice_refused[renice.ref] = renice.nice
                    log.warning("renice of slurm job %s to %d failed: %s", renice.ref, renice.nice, exc)
                    self.store.add_event(
                        now,
                        "slurm.renice_failed",
                        f"slurm job {renice.ref}: Nice={renice.nice} (priority {renice.priority}) refused: {exc}",
                        job_id=renice.job_id,
                    )
                continue
            self._renice_refused.pop(renice.ref, None)
            said = f"slurm job {renice.ref}: Nice={renice.nice} (priority {renice.priority})"
            given = self._nice_given.get(renice.ref)
            if given is not None and renice.was is not None and renice.was != given:
                # corral's priority orders corral's queue and Slurm's alike: an admin's Nice would
                # be one order in Slurm and another in corral, so it is reset, and said so.
                said += (
                    f"; its Nice={renice.was} was set outside corral, and corral's priority decides"
                    f" (corral priority {renice.job_id} N changes it)"
                )
            self._nice_given[renice.ref] = renice.nice
            self.store.add_event(now, "slurm.reniced", said, job_id=renice.job_id)

    def check_settings(self) -> str | None:
        """Whether Slurm accepts corral's own sbatch settings (slurm.partition, account,
        extra_args), asked once at start with `sbatch --test-only` of a 1-CPU job: what is wrong,
        or None. A typo there would otherwise show only as every job's sbatch failing. Slurm not
        answering is no verdict (None, logged): the passes say so (`slurm.unreachable`)."""
        settings = self.config.slurm
        try:
            self.slurm.test_only(
                ["--output=/dev/null", *self.settings_options()],
                self.script,
                ["/dev/null", *self.output_bound(), "true"],
            )
        except SlurmError as exc:
            if batch.sbatch_refusal(str(exc)) is batch.Refusal.TEMPORARY:
                log.warning("could not check the slurm settings with sbatch --test-only: %s", exc)
                return None
            asked = [f"slurm.partition={settings.partition!r}"] if settings.partition else []
            asked += [f"slurm.account={settings.account!r}"] if settings.account else []
            asked += [f"slurm.extra_args={settings.extra_args!r}"] if settings.extra_args else []
            return f"Slurm refuses corral's sbatch settings ({', '.join(asked) or 'none set'}): {exc}"
        return None

    # ---- sbatch -------------------------------------------------------------------------------

    def output_path(self, job_id: int, attempt_id: int, stream: Stream = "output") -> Path:
        """Where Slurm writes the output (--output), or the stderr of a job that keeps it apart
        (--error): the log store's own file unless slurm.output_dir is set (laid out the same way)."""
        return LogStore(self.output_dir).path(job_id, attempt_id, stream)

    def status_path(self, job_id: int, attempt_id: int) -> Path:
        """Where the batch script records the attempt's exit status: beside its output."""
        return self.output_path(job_id, attempt_id).with_suffix(STATUS_SUFFIX)

    def script_dir(self, attempt_id: int) -> Path:
        """Where a batch script's copy is written for its attempt (under slurm.work_dir, which
        the nodes see as the status file's directory), as the agent writes one to the attempt's own."""
        return self.work_dir / "attempts" / str(attempt_id)

    def write_script(self, job: Job, attempt_id: int) -> Path:
        """The job's batch script, read from the store, written for its attempt (mode 0700, as
        slurmd keeps a job's script): the path sbatch's own batch script runs it by."""
        script = self.store.job_script(job.id)
        if script is None:  # (deleted meanwhile: a temporary failure, as any sbatch that could not be made)
            raise OSError(f"job {job.id}'s batch script is no longer in the store")
        directory = self.script_dir(attempt_id)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / job.command[0]
        write_script(path, script)
        return path

    def sbatch_options(self, job: Job, attempt_id: int) -> list[str]:
        """The job's request as sbatch options: per node --cpus-per-task and --mem, --nodes for a
        gang, --time from its time limit, --signal from its own, --nice from its priority,
        --no-requeue, --exclusive for an exclusive job; its ids in --job-name and --comment."""
        settings = self.config.slurm
        res = job.resources
        options = [
            f"--job-name={job_name(job.id, job.name)}",
            f"--comment={comment_for(self.cluster, job.id, attempt_id, self.dispatcher_id)}",
            f"--output={self.output_path(job.id, attempt_id)}",
            # Slurm's own model: both streams to --output, unless --error is given.
            *([f"--error={self.output_path(job.id, attempt_id, 'stderr')}"] if job.separate_stderr else []),
            # The job's own directory, else corral's work dir (the batch script checks that it got
            # there: slurmstepd runs a job whose directory it cannot enter in /tmp instead).
            f"--chdir={job.chdir or self.work_dir}",
            "--export=ALL",
            # Slurm would requeue a job whose node failed itself (JobRequeue=1, its default), and
            # corral would see it pending again: the job ends NODE_FAIL instead, and corral's own
            # node-failure policy (on_node_failure) decides, as for a node of its own.
            "--no-requeue",
            f"--nodes={job.node_count}",
            "--ntasks-per-node=1",
            f"--cpus-per-task={max(1, math.ceil(res.vcpus - 1e-9))}",
            f"--mem={res.ram_mib}M",
            f"--nice={batch.nice_for(job.priority, settings.nice_base)}",
        ]
        if res.gpus:
            options.append(f"--gres=gpu:{res.gpus}")
        if res.scratch_mib:
            options.append(f"--tmp={res.scratch_mib}M")
        if job.time_limit is not None:
            options.append(f"--time={slurm_time(job.time_limit)}")
        if job.exclusive:
            options.append("--exclusive")  # Slurm keeps every other job off its nodes, as corral's filter does
        # Slurm's own --signal (sent with up to a minute's slop), to the batch script, which sends
        # the job's signal to its command as an agent does (BATCH_SCRIPT). Given on the command line,
        # it wins over a job's SBATCH_SIGNAL, which it stands for when the job has no signal.
        options += signal_options(job_signal(job.signal, job.env))[0]
        return [*options, *self.settings_options()]

    def settings_options(self) -> list[str]:
        """What corral's slurm settings ask of every job: --partition, --account, extra_args."""
        settings = self.config.slurm
        options = [f"--partition={settings.partition}"] if settings.partition else []
        options += [f"--account={settings.account}"] if settings.account else []
        return [*options, *settings.extra_args]

    def output_bound(self) -> list[str]:
        """The batch script's arguments that bound the output it keeps (BATCH_SCRIPT): server.max_output
        in bytes (0: no limit), and the line that ends an output cut there, as the log store ends one."""
        limit = self.config.server.max_output_bytes or 0
        return [str(limit), cut_note(limit).decode().strip("\n") if limit else ""]

    def job_env(self, job: Job, attempt_id: int) -> dict[str, str]:
        """sbatch's environment, which --export=ALL hands to the job: this process's, less corral's
        credentials, plus the job's env (what sbatch must not be steered by set back by the batch
        script: corral.executor.slurm.sbatch_environment) and its ids (and an array task's,
        corral.core.job_array)."""
        own = {k: v for k, v in os.environ.items() if k not in PRIVATE_ENV}
        env = sbatch_environment(own, job.env)
        env.update(CORRAL_JOB_ID=str(job.id), CORRAL_ATTEMPT_ID=str(attempt_id))
        if job.chdir is not None:
            env[CHDIR_VARIABLE] = job.chdir
        # For the batch script to send the job's signal; never a variable of that name of corral's own.
        env.pop(SIGNAL_VARIABLE, None)
        env.update(signal_options(job_signal(job.signal, job.env))[1])
        # For the batch script to bound the --error file too; never the job's own variable of that
        # name, which would have its stderr through a second limiter into its one output.
        env.pop(SEPARATE_STDERR_VARIABLE, None)
        if job.separate_stderr:
            env[SEPARATE_STDERR_VARIABLE] = "1"
        if job.array is not None:
            env.update(job_array.environment(job.array))
        return env

    def _submit(self, job: Job, attempt_id: int, now: float) -> bool:
        """sbatch the attempt; False if Slurm failed in a way that the next sbatch would too."""
        if not self.store.holds_unsubmitted(attempt_id, self.dispatcher_id):
            # Read just before sbatch: this dispatcher may have been frozen since its claim or its
            # snapshot long enough for a peer to judge it silent and release the claim (the job
            # may be queued again, or claimed and run by the peer). Submitting now would run the
            # job beside the peer's run, until the next pass scancelled it as an orphan.
            log.warning(
                "attempt %s of job %s is no longer this dispatcher's: not submitted",
                attempt_id,
                job.id,
                extra={"job_id": job.id, "attempt_id": attempt_id},
            )
            return True
        try:
            self.output_path(job.id, attempt_id).parent.mkdir(parents=True, exist_ok=True)
            self.work_dir.mkdir(parents=True, exist_ok=True)
            command = job.command
            if job.batch_script:
                command = [str(self.write_script(job, attempt_id)), *job.command[1:]]
            ref = self.slurm.sbatch(
                self.sbatch_options(job, attempt_id),
                self.script,
                [str(self.status_path(job.id, attempt_id)), *self.output_bound(), *command],
                self.job_env(job, attempt_id),
            )
        except (SlurmError, OSError) as exc:
            if job.batch_script:
                self._forget_script(attempt_id)
            # With Slurm's message as the reason (batch.sbatch_refusal): a request Slurm refuses
            # for good (a value of the job's SBATCH_* variables too) fails the job at once, as sbatch
            # fails for a Slurm user; anything else (slurmctld unreachable or busy, a refused
            # setting of corral's) is a temporary failure, and the pass submits no more: the next
            # sbatch would most likely fail the same way, each after up to command_timeout. A
            # submission that did happen (sbatch timed out after it) is scancelled as an orphan.
            log.warning("sbatch of job %s failed: %s", job.id, exc, extra={"job_id": job.id, "attempt_id": attempt_id})
            given = [name for name in job.env if name in SBATCH_PASSED]  # what sbatch was given of the job's
            kind = batch.sbatch_refusal(str(exc), given) if isinstance(exc, SlurmError) else batch.Refusal.TEMPORARY
            if kind is batch.Refusal.REQUEST:
                why = f"sbatch refused: {exc}"
                variable = batch.refused_variable(str(exc))
                if variable is not None:
                    # sbatch's message names its option, not the job's variable that gave it.
                    why += f" (the job's {variable}={job.env[variable]!r})"
                outcome = retry.after_refusal(job, why, (attempt_id,))
            else:
                why = f"sbatch failed: {exc}"
                if kind is batch.Refusal.SETTING:
                    why += " (corral's slurm settings: partition, account, extra_args, nice_base)"
                outcome = retry.after_temp_failure(job, now, self.config.policy.retry, why, (attempt_id,))
            self.store.apply_outcome(outcome, now)
            return kind is batch.Refusal.REQUEST
        said = f"attempt {attempt_id} submitted as slurm job {ref}"
        # A job stored before submission refused them: its job.submitted event says what sbatch was not given.
        withheld = sorted(name for name in job.env if sbatch_variable_refusal(name))
        if withheld:
            said += (
                f"; its {', '.join(withheld)} reached the job only, not sbatch: corral's slurm settings choose its"
                " account, QOS, partition and resources"
            )
        self.store.set_executor_ref(attempt_id, ref, said, now)
        self._nice_given[ref] = batch.nice_for(job.priority, self.config.slurm.nice_base)
        return True

    def _tell_cut_output(self, job_id: int, attempt_id: int) -> None:
        """Log, as the server does of an agent's, that an ended attempt's output (or its stderr kept
        apart) was cut at server.max_output: the batch script's line is there, at the limit."""
        limit = self.config.server.max_output_bytes
        if limit is None:
            return
        note = cut_note(limit)
        for stream in STREAMS:
            try:
                with self.output_path(job_id, attempt_id, stream).open("rb") as output:
                    output.seek(limit)
                    cut = output.read(len(note)) == note
            except OSError:
                continue  # (no stderr file: the job keeps it in its output)
            if cut:
                log.warning(
                    "job %s: attempt %s's %s reached server.max_output (%s bytes): the rest was dropped",
                    job_id,
                    attempt_id,
                    stream,
                    limit,
                    extra={"job_id": job_id, "attempt_id": attempt_id},
                )

    def _collect_output(self, job_id: int, attempt_id: int) -> None:
        """Copy an ended attempt's output (and stderr kept apart) into the log store when it was
        written elsewhere."""
        self._tell_cut_output(job_id, attempt_id)
        for stream in STREAMS:
            source = self.output_path(job_id, attempt_id, stream)
            target = self.logs.path(job_id, attempt_id, stream)
            if source == target or not source.exists():
                continue
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, target)
            except OSError as exc:
                log.warning(
                    "copying the %s of job %s from %s failed: %s",
                    stream,
                    job_id,
                    source,
                    exc,
                    extra={"job_id": job_id},
                )

    # ---- a clean stop -------------------------------------------------------------------------

    def _shutdown_fleet(self, reason: str) -> None:
        """scancel this dispatcher's Slurm jobs and requeue their jobs as temporary failures
        (with --keep-fleet this is not called: the Slurm jobs run on, for the next corral). Those
        Slurm could not be asked to scancel are left to the next corral in the same way."""
        # A last look at Slurm first: a job that ended since the last pass (up to loop.interval
        # ago) is recorded as it ended, complete or failed, instead of being requeued and run a
        # second time. If squeue fails, every attempt is requeued, as before.
        with self.store.pass_lock(self.config.policy.dispatch.dispatcher_stale / 2):
            looked = self._follow(self.clock(), submit=False) is not None
        now = self.clock()
        snapshot = self.store.load_snapshot(self.dispatcher_id, [], 0.0)
        jobs = {job.id: job for job in snapshot.jobs}
        refs = self.store.executor_refs(self.dispatcher_id)
        mine: list[Attempt] = [a for a in snapshot.attempts if a.dispatcher_id == self.dispatcher_id]
        cancel = [refs[a.id] for a in mine if a.id in refs]
        left: set[str] = set()  # Slurm jobs that may still run: their attempts are not requeued
        if cancel:
            try:
                self.slurm.scancel(cancel)
            except SlurmError as exc:
                log.warning("scancel %s failed: %s", ", ".join(cancel), exc)
                left = self._still_active(cancel) if looked else set(cancel)
                if left:
                    self._left_running(sorted(left, key=int), str(exc), now)
        for attempt in mine:
            job = jobs.get(attempt.job_id)
            if job is not None and refs.get(attempt.id) not in left:
                self.store.apply_outcome(
                    retry.after_temp_failure(job, now, self.config.policy.retry, reason, (attempt.id,)), now
                )

    def _still_active(self, refs: list[str]) -> set[str]:
        """Which of `refs` Slurm may still run or start after a scancel that failed: those it lists
        pending or running, or all of them if squeue fails too."""
        try:
            listing = self.slurm.squeue()
        except SlurmError:
            return set(refs)
        wanted = set(refs)
        return {
            j.id
            for j in listing
            if j.id in wanted and phase_of(j.state) in batch.ACTIVE and batch.base_state(j.state) != "COMPLETING"
        }

    def _left_running(self, refs: list[str], error: str, now: float) -> None:
        """A stop that could not scancel leaves those Slurm jobs' attempts as they are, as
        --keep-fleet does: requeued, each would be submitted again by the next corral while its
        Slurm job still ran (slurmd runs a job on while slurmctld is away), and one that completed
        meanwhile would have run twice. The next corral with this data directory follows them."""
        message = (
            f"corral stopped, and scancel failed: {error}; slurm jobs {', '.join(refs)} are left to Slurm,"
            " and the next corral with this data directory records how they end"
        )
        log.warning("%s", message)
        self.store.add_event(now, "slurm.unreachable", message)


def slurm_time(seconds: float) -> str:
    """A time limit as sbatch's --time (D-HH:MM:SS), rounded up to whole seconds, at least 1 s."""
    total = max(1, math.ceil(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
