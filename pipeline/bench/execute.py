"""Running a suite's problems: one session per problem, each run by its own worker process on one slot (a GPU, or
a CPU slot), longest first; a worker that crashes or hangs is recorded with its story and the suite goes on.

Local: a thread per slot starts `python -m pipeline.worker` with `CUDA_VISIBLE_DEVICES` set to its GPU and waits
for it, with a deadline. Ray: the same job as a Ray task that asks for one GPU (none on the CPU), run in a store
of its own on whichever machine Ray picks, its session brought back to the driver's store as a bundle.

Everything is in the store as it happens (the item's session id before its worker starts), so a driver killed at
any moment, even with SIGKILL, is resumed with --resume: finished problems are kept, a session whose worker
outlived the driver is waited for, and the others run (again) from their session in the store.
"""

from __future__ import annotations

import dataclasses
import os
import queue
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pipeline
from pipeline import api
from pipeline.bench.results import row_for
from pipeline.sessions.backends import BackendSpec
from pipeline.stages.method import Budget
from pipeline.store import Store, now_text
from pipeline.store.records import BenchItemRecord, BenchRunRecord
from pipeline.types import EvalOptions
from pipeline.worker import EXIT_CLAIMED

POLL_S = 0.5
STOP_GRACE_S = 10.0  # after SIGINT, a worker has this long to stop before SIGKILL
MAX_CLAIM_TRIES = 5  # our worker found another live one holding the session this many times: its exit stands
DEFAULT_TIMEOUT_S = 3600.0  # no wall budget: a problem whose worker runs past an hour is a hang


@dataclasses.dataclass(frozen=True)
class BenchSettings:
    """How every problem of a run is run (kept in the run's args: --resume runs the rest the same way)."""

    backend: BackendSpec
    device: str  # cuda or cpu
    budget: Budget
    options: EvalOptions
    timeout_s: float | None = None  # a worker still running after this is killed and the problem recorded as a hang
    profile_mode: str = "auto"

    @property
    def deadline_s(self) -> float:
        """Seconds a problem's worker may run: --timeout-s, else twice the wall budget plus five minutes."""
        if self.timeout_s is not None:
            return self.timeout_s
        return 2 * self.budget.max_wall_s + 300 if self.budget.max_wall_s else DEFAULT_TIMEOUT_S

    def to_json(self) -> dict[str, Any]:
        return {"backend": self.backend.to_json(), "device": self.device, "budget": dataclasses.asdict(self.budget),
                "baselines": list(self.options.baselines), "timeout_s": self.timeout_s, "profile_mode": self.profile_mode}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BenchSettings:
        options = EvalOptions(device=data["device"], baselines=tuple(data.get("baselines", ("eager", "compile"))))
        return cls(BackendSpec.from_json(data["backend"]), data["device"], Budget(**data["budget"]), options, data.get("timeout_s"),
                   data.get("profile_mode", "auto"))


@dataclasses.dataclass
class Ended:
    """How one worker ended: the status of the problem and its story."""

    status: str  # done, failed, crashed, hang, interrupted, error
    story: str = ""


def signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def run_worker(db: Path, session_id: str, gpu: str | None, backend: BackendSpec, deadline_s: float,
               stop: threading.Event, log: Path, on_pid: Callable[[int], None] = lambda pid: None) -> tuple[int | None, str]:
    """Run one session's worker to its end, on `gpu` (its CUDA_VISIBLE_DEVICES; None leaves the variable as it
    is); (its exit code, or None when it was stopped or killed at the deadline; and why it was)."""
    process = api.worker_process(db, session_id, backend, log, gpu)
    on_pid(process.pid)
    started = time.monotonic()
    while True:
        try:
            return process.wait(timeout=POLL_S), ""
        except subprocess.TimeoutExpired:
            pass
        if stop.is_set():
            _end_group(process, signal.SIGINT)
            return None, "stopped"
        if time.monotonic() - started > deadline_s:
            _end_group(process, signal.SIGKILL)
            return None, "deadline"


def _end_group(process: Any, first: signal.Signals) -> None:
    """Signal the worker's process group, then kill it outright if it has not ended within the grace."""
    try:
        os.killpg(process.pid, first)
    except ProcessLookupError:
        return
    try:
        process.wait(timeout=STOP_GRACE_S if first != signal.SIGKILL else 30)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()


def _log_tail(path: Path, lines: int = 4, limit: int = 600) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 8192))
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return " / ".join(line.strip() for line in text.strip().splitlines()[-lines:])[-limit:]


def _last_event(store: Store, session_id: str) -> str:
    tail = store.events_tail(session_id, 1)
    return f"last step: {tail[-1].message}" if tail else "no step recorded"


def judge_ending(store: Store, session_id: str, code: int | None, why: str, deadline_s: float, log: Path) -> Ended:
    """The problem's status from its session and its worker's exit."""
    record = store.session(session_id)
    if record.status == "done":
        return Ended("done", record.outcome.get("headline", ""))
    if why == "stopped":
        at = f"during stage {record.stage}" if record.stage else f"before its first stage ended ({_last_event(store, session_id)})"
        return Ended("interrupted", f"stopped by an interrupt (Ctrl-C or SIGINT) {at}; --resume goes on from the store")
    if why == "deadline":
        return Ended("hang", f"no result within {deadline_s:.0f} s (killed); {_last_event(store, session_id)}")
    if record.status == "failed":
        return Ended("failed", record.error or "the session failed")
    if record.status == "cancelled":
        return Ended("failed", "the session was cancelled (in the app or with egg session cancel)")
    if code is not None and code < 0:
        return Ended("crashed", f"the worker died from {signal_name(code)} during {record.stage or 'the start'}; {_last_event(store, session_id)}")
    tail = _log_tail(log)
    return Ended("crashed", f"the worker exited with code {code} (session {record.status}); {_last_event(store, session_id)}"
                 + (f"; log: {tail}" if tail else ""))


def _wait_for_orphan(store: Store, session_id: str, stop: threading.Event, deadline_s: float) -> str:
    """A worker left by a killed driver still runs this session: wait for it ("" when it ended)."""
    started = time.monotonic()
    while not stop.is_set():
        record = store.session(session_id)
        if record.finished or not api.worker_alive(record):
            return ""
        if time.monotonic() - started > deadline_s:
            return "deadline"
        time.sleep(POLL_S)
    return "stopped"


class ItemRunner:
    """Runs the items of one bench run on this machine and records each in the store."""

    def __init__(self, store: Store, run: BenchRunRecord, settings: BenchSettings, stop: threading.Event,
                 on_change: Callable[[BenchItemRecord], None] = lambda item: None) -> None:
        self.store, self.run, self.settings, self.stop, self.on_change = store, run, settings, stop, on_change

    def _update(self, item: BenchItemRecord, **fields: Any) -> BenchItemRecord:
        self.store.update_bench_item(self.run.id, item.problem, **fields)
        fresh = next(i for i in self.store.bench_items(self.run.id) if i.problem == item.problem)
        self.on_change(fresh)
        return fresh

    def session_for(self, item: BenchItemRecord) -> str | Ended:
        """The item's session id (created now when it has none), or how creating it failed."""
        if item.session_id and self.store.session(item.session_id) is not None:
            return item.session_id
        s, label = self.settings, f"bench {self.run.id}: {item.problem}"
        # a driver killed between making the session and recording it on the item left one behind: take it up
        if record := self.store.unstarted_session(label):
            Path(record.work_dir).mkdir(parents=True, exist_ok=True)  # its maker may have died before making the folder
        try:
            record = record or api.create_session(self.store, problem_path=item.path, backend=s.backend, review="auto", device=s.device,
                                                  budget=s.budget, options=s.options, profile_mode=s.profile_mode, label=label)
        except api.ApiError as error:
            return Ended("error", str(error))
        self._update(item, session_id=record.id)
        return record.id

    def run_item(self, item: BenchItemRecord, slot: str) -> BenchItemRecord:
        started = time.monotonic()
        item = self._update(item, status="running", slot=slot, started_at=now_text(), story="")
        found = self.session_for(item)
        if isinstance(found, Ended):
            return self.finish(item, found, started)
        item = dataclasses.replace(item, session_id=found)
        log = Path(self.store.session(found).work_dir) / "worker.log"
        code, why = self._run_session(found, slot, log, started)
        return self.finish(item, judge_ending(self.store, found, code, why, self.settings.deadline_s, log), started)

    def _run_session(self, found: str, slot: str, log: Path, started: float) -> tuple[int | None, str]:
        """Run the session to its end: a worker that outlived a killed driver is waited for, and one that claims the
        session between our look and our own worker's start (our worker exits with EXIT_CLAIMED) is waited for too."""
        deadline = self.settings.deadline_s
        code, why = None, ""
        for _ in range(MAX_CLAIM_TRIES):
            left = deadline - (time.monotonic() - started)
            record = self.store.session(found)
            if not record.finished and api.worker_alive(record):
                self.store.add_event(found, "info", f"egg bench: this session's worker (pid {record.worker_pid}) outlived its bench driver; waiting for it")
                why = _wait_for_orphan(self.store, found, self.stop, left)
                if why == "deadline":
                    _kill_pid(record.worker_pid)
                record = self.store.session(found)
                if not why and not record.finished:  # it died (or went silent) before the end: run it again from the store
                    self.store.add_event(found, "info", "egg bench: the outliving worker ended before the session did; running it again from the store")
            if record.finished:
                return (0 if record.status == "done" else 1), ""
            if why:
                return None, why
            if record.status == "failed":  # a retry of a run that was stopped while failing: start it from the store
                api.reopen(self.store, found)
            self.store.add_event(found, "worker", f"egg bench {self.run.id} runs this session on slot {slot}")
            gpu = slot if self.settings.device == "cuda" else None
            code, why = run_worker(self.store.path, found, gpu, self.settings.backend, left, self.stop, log)
            if code != EXIT_CLAIMED:
                return code, why
        return code, why

    def finish(self, item: BenchItemRecord, ended: Ended, started: float) -> BenchItemRecord:
        wall = round(time.monotonic() - started, 1)
        fields: dict[str, Any] = {"status": ended.status, "story": ended.story, "wall_s": wall}
        if ended.status != "interrupted":
            fields["finished_at"] = now_text()
        item = dataclasses.replace(item, status=ended.status, story=ended.story, wall_s=wall)
        session = self.store.session(item.session_id) if item.session_id else None
        fields["row"] = row_for(item, session)
        return self._update(item, **fields)


def _kill_pid(pid: int | None) -> None:
    if pid:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def run_local(runner: ItemRunner, items: list[BenchItemRecord], slots: list[str], on_slot: Callable[[str, str], None]) -> None:
    """Each slot's thread takes the next item (they come longest first) until none is left or the run is stopped."""
    work: queue.Queue[BenchItemRecord] = queue.Queue()
    for item in items:
        work.put(item)
    errors: list[BaseException] = []

    ended = {slot: threading.Event() for slot in slots}

    def serve(slot: str) -> None:
        try:
            take(slot)
        finally:
            ended[slot].set()

    def take(slot: str) -> None:
        while not runner.stop.is_set():
            try:
                item = work.get_nowait()
            except queue.Empty:
                break
            on_slot(slot, item.problem)
            try:
                runner.run_item(item, slot)
            except BaseException as error:  # the store itself failed: the run stops, everything finished is kept
                errors.append(error)
                runner.stop.set()
        on_slot(slot, "")

    threads = [threading.Thread(target=serve, args=(slot,), name=f"egg-bench-{slot}", daemon=True) for slot in slots]
    for thread in threads:
        thread.start()
    # The main thread waits on events, never in Thread.join: a Ctrl-C that lands inside join() leaves the thread
    # reported dead while it runs on (CPython 3.11), and the driver would exit with its worker orphaned.
    try:
        while not all(e.is_set() for e in ended.values()):
            time.sleep(POLL_S)
    except KeyboardInterrupt:  # Ctrl-C: every slot stops its worker (SIGINT, then SIGKILL after a grace) and records it
        runner.stop.set()
        while not all(e.is_set() for e in ended.values()):
            time.sleep(POLL_S)
    if errors:
        raise errors[0]


# Ray -------------------------------------------------------------------------------------------------------------


def remote_job(job: dict[str, Any]) -> dict[str, Any]:
    """One problem as a Ray task, on whichever machine Ray placed it: a store of its own in a temporary folder,
    the session run by a worker process as on one machine (Ray has set CUDA_VISIBLE_DEVICES to the task's GPU),
    and the session returned as a bundle for the driver's store."""
    settings = BenchSettings.from_json(job["settings"])
    folder = Path(tempfile.mkdtemp(prefix="egg-bench-"))
    store = api.open_store(folder / "egg.sqlite")
    started = time.monotonic()
    try:
        try:
            record = api.create_session(store, problem_source=job["source"], problem_filename=job["filename"], backend=settings.backend,
                                        review="auto", device=settings.device, budget=settings.budget, options=settings.options,
                                        profile_mode=settings.profile_mode, label=job["label"])
        except api.ApiError as error:
            return {"status": "error", "story": str(error), "bundle": None, "wall_s": round(time.monotonic() - started, 1)}
        slot = os.environ.get("CUDA_VISIBLE_DEVICES", "") if settings.device == "cuda" else "cpu"
        log = Path(record.work_dir) / "worker.log"
        code, why = run_worker(store.path, record.id, None, settings.backend, settings.deadline_s, threading.Event(), log)
        ended = judge_ending(store, record.id, code, why, settings.deadline_s, log)
        return {"status": ended.status, "story": ended.story, "bundle": api.export_bundle(store, record.id),
                "wall_s": round(time.monotonic() - started, 1), "node": os.uname().nodename, "slot": slot}
    finally:
        store.close()


def run_ray(runner: ItemRunner, items: list[BenchItemRecord], address: str | None, on_slot: Callable[[str, str], None]) -> None:
    """Every item as a Ray task asking for one GPU (cuda) or one CPU; results are gathered here, into the store."""
    try:
        import ray
    except ImportError:
        raise RuntimeError("--executor ray needs Ray: pip install 'egg[ray]'") from None
    if not ray.is_initialized():
        ray.init(address=address or None, include_dashboard=False, log_to_driver=False, configure_logging=False,
                 runtime_env={"env_vars": {"PYTHONPATH": str(pipeline.ROOT)}} if address is None else None)
    gpus = 1 if runner.settings.device == "cuda" else 0
    task = ray.remote(num_gpus=gpus, num_cpus=1, max_retries=0)(remote_job)
    pending: dict[Any, BenchItemRecord] = {}
    settings = runner.settings.to_json()
    for item in items:
        source = Path(item.path).read_text(encoding="utf-8")
        job = {"settings": settings, "source": source, "filename": Path(item.path).name, "label": f"bench {runner.run.id}: {item.problem}"}
        pending[task.remote(job)] = runner._update(item, status="running", slot="ray", started_at=now_text(), story="")
        on_slot("ray", f"{len(pending)} submitted")
    try:
        while pending and not runner.stop.is_set():
            try:
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=POLL_S)
            except KeyboardInterrupt:
                runner.stop.set()
                break
            for ref in ready:
                item = pending.pop(ref)
                try:
                    result = ray.get(ref)
                except Exception as error:  # the task itself died (its node lost, the worker killed)
                    result = {"status": "crashed", "story": f"the Ray task failed: {type(error).__name__}: {str(error)[:300]}", "bundle": None, "wall_s": None}
                _gathered(runner, item, result)
                on_slot("ray", f"{len(pending)} in flight")
    finally:
        for ref, item in pending.items():
            ray.cancel(ref, force=True)
            runner._update(item, status="interrupted", story="stopped by the person; --resume runs it again")
        on_slot("ray", "")


def _gathered(runner: ItemRunner, item: BenchItemRecord, result: dict[str, Any]) -> None:
    if result.get("bundle"):
        record = api.import_bundle(runner.store, result["bundle"], label=f"bench {runner.run.id}: {item.problem}")
        item = runner._update(item, session_id=record.id)
    ended = Ended(result["status"], result["story"])
    started = time.monotonic() - (result.get("wall_s") or 0.0)
    item = runner._update(item, slot=f"ray:{result.get('node', '?')}:{result.get('slot', '')}".rstrip(":"))
    runner.finish(item, ended, started)
