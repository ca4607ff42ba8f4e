"""A bench run from start to end: its record in the store, its order, its progress, its files in OUT."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipeline.bench.execute import BenchSettings, ItemRunner, run_local, run_ray
from pipeline.bench.problems import SuiteError, SuiteProblem
from pipeline.bench.results import rows, summary_line, write_outputs
from pipeline.store import Store, now_text
from pipeline.store.records import BENCH_RESUME_KEEPS, BenchItemRecord, BenchRunRecord

MANIFEST = "bench.json"  # in OUT: which run (and store) the folder holds


def read_manifest(out: Path) -> dict[str, Any] | None:
    path = out / MANIFEST
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise SuiteError(f"{path}: not a bench manifest ({error})") from None


def _item(problem: SuiteProblem, ordinal: int) -> dict[str, Any]:
    return {"problem": problem.name, "path": str(problem.path), "level": problem.level, "ordinal": ordinal}


def open_run(store: Store, out: Path, dirs: list[Path], problems: list[SuiteProblem], settings: BenchSettings,
             args: dict[str, Any], resume: bool) -> BenchRunRecord:
    """A new run for OUT, or (--resume) the one OUT holds, with any problem found since added to it."""
    manifest = read_manifest(out)
    if manifest is not None and not resume:
        raise SuiteError(f"{out} holds bench run {manifest.get('run_id')} already: --resume goes on with it, or choose another --out")
    if manifest is None and resume:
        raise SuiteError(f"{out}: no bench run to resume (no {MANIFEST})")
    if manifest is not None:
        run = store.bench_run(manifest.get("run_id", ""))
        if run is None:
            raise SuiteError(f"{out}: its run {manifest.get('run_id')} is not in the store {store.path} (it was made with {manifest.get('db')}: --db)")
        known = {i.problem for i in store.bench_items(run.id)}
        new = [p for p in problems if p.name not in known]
        if new:
            store.add_bench_items(run.id, [_item(p, len(known) + n) for n, p in enumerate(new)])
        store.update_bench_run(run.id, status="running", finished_at=None)
        return store.bench_run(run.id)
    run_id = uuid.uuid4().hex[:10]
    out.mkdir(parents=True, exist_ok=True)
    store.create_bench_run(run_id, out_dir=str(out.resolve()), dirs=[str(d) for d in dirs],
                           args={**args, "settings": settings.to_json()}, items=[_item(p, n) for n, p in enumerate(problems)])
    (out / MANIFEST).write_text(json.dumps({"run_id": run_id, "db": str(store.path)}, indent=1) + "\n", encoding="utf-8")
    return store.bench_run(run_id)


def longest_first(store: Store, items: list[BenchItemRecord]) -> list[BenchItemRecord]:
    """The order that leaves no GPU idle at the end: what took longest before (any earlier run of the same file)
    first; problems never run by level (whole models before single operators), then by file size."""
    walls = store.bench_walls([i.path for i in items])

    def estimate(item: BenchItemRecord) -> float:
        if item.path in walls:
            return walls[item.path]
        try:
            size = Path(item.path).stat().st_size
        except OSError:
            size = 0
        return 60.0 * (item.level or 1) + size / 1000.0

    return sorted(items, key=estimate, reverse=True)


class Suite:
    """Runs a run's unfinished items on the slots (or through Ray), keeping OUT's files current as items end."""

    def __init__(self, store: Store, run: BenchRunRecord, out: Path, settings: BenchSettings,
                 on_item: Callable[[BenchItemRecord, str], None] = lambda item, summary: None,
                 chosen: set[str] | None = None) -> None:
        self.store, self.run, self.out, self.settings, self.on_item = store, run, out, settings, on_item
        self.chosen = chosen  # the problems this call runs (--only, --level), all of the run's when None
        self.stop = threading.Event()
        self._lock = threading.Lock()

    def write(self) -> list[Path]:
        return write_outputs(self.out, self.store.bench_run(self.run.id), rows(self.store, self.run.id))

    def summary(self) -> str:
        return summary_line(rows(self.store, self.run.id))

    def _changed(self, item: BenchItemRecord) -> None:
        with self._lock:
            if item.status not in ("running", "pending"):
                self.write()
            self.on_item(item, self.summary())

    def pending(self) -> list[BenchItemRecord]:
        """What this run has yet to run: the items not ended, and those whose worker crashed (run again from their
        session), longest first."""
        items = [i for i in self.store.bench_items(self.run.id) if i.status not in BENCH_RESUME_KEEPS]
        return longest_first(self.store, [i for i in items if self.chosen is None or i.problem in self.chosen])

    def execute(self, slots: list[str], executor: str, address: str | None, on_slot: Callable[[str, str], None]) -> bool:
        """Run every unfinished item; True when all of them ran (False: stopped, with everything finished kept)."""
        runner = ItemRunner(self.store, self.run, self.settings, self.stop, self._changed)
        items = self.pending()
        try:
            if executor == "ray":
                run_ray(runner, items, address, on_slot)
            else:
                run_local(runner, items, slots, on_slot)
        finally:
            self._close()
        return not self.stop.is_set()

    def _close(self) -> None:
        for item in self.store.bench_items(self.run.id):
            if item.status == "running" and self.stop.is_set():
                self.store.update_bench_item(self.run.id, item.problem, status="interrupted", story="stopped by the person; --resume goes on from the store")
        finished = all(i.finished for i in self.store.bench_items(self.run.id))
        self.store.update_bench_run(self.run.id, status="done" if finished else "interrupted", finished_at=now_text() if finished else None)
        self.write()
