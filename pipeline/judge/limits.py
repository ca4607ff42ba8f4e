"""The limits every job runs under, and the parent's watch on its memory.

- Memory: the parent sums the memory of the job's processes (their proportional shares) (its own view of /proc, which no job can
  change) every tenth of a second and ends the job past its limit: `runtime_error: over the memory limit of N GB`.
  A job on the CPU also gets an address-space limit of that much beyond what torch maps at its start, so a single
  huge allocation fails at once inside the job instead of reaching the machine's OOM killer. (A GPU job keeps no
  address-space limit: CUDA reserves far more address space than it uses.)
- Processes: a job run as `nobody` may have at most `processes` of that user's processes and threads.
- Files: no file a job writes grows beyond `file_bytes`; its printed output is capped by the fork server's log
  relay (pipeline.judge.forkserver.Log).

Defaults come from the machine (half its memory); `EGG_JOB_MEMORY_GB` overrides. Once a problem's sizes are known
(its reference facts), `problem_limits` raises a job's limit to what the judge's footprint for that problem needs
(`Footprint`), capped by what the machine has; `Footprint.does_not_fit` says when it needs more than that.

Imports: the standard library only (the fork server's children apply these).
"""

from __future__ import annotations

import dataclasses

import os
import resource
import signal
from dataclasses import asdict, dataclass

MEMORY_VARIABLE = "EGG_JOB_MEMORY_GB"
DEFAULT_PROCESSES = 1024
DEFAULT_FILE_BYTES = 64 << 30


@dataclass(frozen=True)
class Limits:
    memory_bytes: int
    processes: int = DEFAULT_PROCESSES
    file_bytes: int = DEFAULT_FILE_BYTES

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Limits:
        return cls(int(data["memory_bytes"]), int(data["processes"]), int(data["file_bytes"]))

    @property
    def memory_gb(self) -> float:
        return self.memory_bytes / 2**30


def machine_memory_bytes() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 16 << 30


def default_limits(memory_gb: float | None = None) -> Limits:
    """Half the machine's memory unless the caller or EGG_JOB_MEMORY_GB says otherwise."""
    if memory_gb is None and os.environ.get(MEMORY_VARIABLE, "").strip():
        memory_gb = float(os.environ[MEMORY_VARIABLE])
    memory = int(memory_gb * 2**30) if memory_gb else machine_memory_bytes() // 2
    return Limits(max(memory, 256 << 20))


# The judge's footprint ----------------------------------------------------------------------------------------------

BASE_HOST_BYTES = 6 << 30  # a GPU worker's own host memory (Python, torch, CUDA's libraries and context): an estimate, not measured
# the judge's float64 chunks while it compares (pipeline.judge.compare.CHUNK_ELEMENTS), and the candidate outputs that
# may wait on the GPU beyond one set (pipeline.judge.judge.WAITING_ON_DEVICE_BYTES)
COMPARE_BYTES = 5 * (1 << 26) * 8 + (1 << 30)
DEVICE_RESERVE_BYTES = 2 << 30  # each process's CUDA context and allocator slack


@dataclass(frozen=True)
class Footprint:
    """What one check of a problem holds at once, in bytes, from the problem's own sizes: I (one input set), O (one
    set's outputs), W (its weights and buffers), A (the reference output sets the judge lets its worker run ahead,
    at least 2), T (timed input sets). What the problem itself needs to run once is P = W + I + O.

    On the device, the largest of three phases:
      checked calls  candidate W + I + O      (its call's output; the mutation check's copy of the inputs goes to
                                               the host when the device lacks room for it)
                   + reference W + I + O
                   + judge     (A + 1)·O + C  (at most A checked sets of reference outputs not yet compared, and
                                               one candidate set: the copies the workers hand over, counted here
                                               once; any more candidate sets that wait go to the host; the first
                                               trial's reference is cut to its repeats' subsamples once the trial
                                               is compared; C: the comparison's chunks and 1 GiB of waiting)
      timed calls    candidate W + (T + 1)·I + 2O  (the timed sets and the fixed buffers they are loaded into)
                   + reference W + I + O       (it may still compute the verified timed trials' outputs then: a
                                               16 GB pooling input on an 80 GB card, T = 3, ran the reference out of
                                               GPU memory at re-verification, bench/results/2026-12-07-s25; on a
                                               GPU, T is cut to what fits, `fitting_timed_sets`)
      reference run  W + (T + 1)·I + O        (its baselines, timed the same way)
    so at most 2W + 2I + (A + 3)·O + C = 2P + (A + 1)·O + C: 4.5 P for A = 2, I = O and W = 0; the reference's
    own temporaries come on top, as they do in any harness that runs it.
    (Session 19: 2W + 3I + (A + 6)·O, 5.5 P, which counted each handed-over copy twice, in its worker and in the
    judge, the mutation copy on the device when it goes to the host, and the first trial's reference held whole
    until its last repeat. Before: 2W + 4I + (A + 5 + S)·O, S the checked sets (8), plus up to 8I left in the
    workers' caches: 2W + 15O + 12I at worst, 13.5 P, for A = 2. The judge held on the device every candidate
    output that came before the reference's; the candidate held the first trial's inputs through every call and
    its mutation copy always on the device; drawing a hidden trial's inputs left up to 4 float32 copies of them in
    each worker's cache; the judge let the reference run 16 GiB ahead whatever the card; the reference's
    degeneracy watch made a float64 copy of every output. On the host, output files sent when the device refused
    to export stayed until the job ended: 8 sets of 8 GB for a convolution, over the fixed limit of half the
    machine.)

    On the host, a GPU job holds its base (BASE_HOST_BYTES), the mutation check's copy I when it is there, and, only
    when the device refuses to export outputs, A + 1 sets of output files (each deleted once the judge has read it).
    A CPU job holds the device's footprint in host memory (it has no other)."""

    input_bytes: int
    output_bytes: int
    weight_bytes: int = 0
    ahead_sets: int = 2
    timed_sets: int = 0

    @property
    def problem_bytes(self) -> int:
        return self.weight_bytes + self.input_bytes + self.output_bytes

    def device_bytes(self) -> int:
        w, i, o = self.weight_bytes, self.input_bytes, self.output_bytes
        checked = (w + i + o) + (w + i + o) + (self.ahead_sets + 1) * o + COMPARE_BYTES
        timed = (w + (self.timed_sets + 1) * i + 2 * o) + (w + i + o if self.timed_sets else 0)
        reference = w + (self.timed_sets + 1) * i + o
        return max(checked, timed, reference) + 2 * DEVICE_RESERVE_BYTES

    def beside_candidate_bytes(self) -> int:
        """What the GPU keeps free for the others while the candidate's worker makes a copy it could keep on the host
        (a held call, the mutation check's copy): the reference's W + I + O and the judge's (A + 1)·O + C, with their
        processes' reserve. The footprint counts the candidate at W + I + O; what it takes beyond comes out of the rest."""
        w, i, o = self.weight_bytes, self.input_bytes, self.output_bytes
        return (w + i + o) + (self.ahead_sets + 1) * o + COMPARE_BYTES + 2 * DEVICE_RESERVE_BYTES

    def job_host_bytes(self, device: str) -> int:
        """What one job may hold in host memory: its base, and the copies it may need there."""
        if device == "cpu":
            w, i, o = self.weight_bytes, self.input_bytes, self.output_bytes
            return BASE_HOST_BYTES + w + 2 * i + (self.ahead_sets + 2) * o
        return BASE_HOST_BYTES + self.input_bytes + (self.ahead_sets + 1) * self.output_bytes

    def host_need_bytes(self, device: str) -> int:
        """The machine's memory the check cannot do without: both jobs' bases and, on a GPU, the mutation check's
        copy on the host (the output files of a refused export are a fallback its limit allows for, not a need); on
        the CPU, the device's footprint."""
        if device == "cpu":
            return self.device_bytes() + 2 * BASE_HOST_BYTES
        return 2 * BASE_HOST_BYTES + self.input_bytes

    def does_not_fit(self, device: str, host_available: int, device_available: int | None) -> str:
        """'' when the check fits the machine, else why not, with the numbers (needed vs available)."""
        gb = 2**30
        shape = (f"one input set {self.input_bytes / gb:.3g} GB, its outputs {self.output_bytes / gb:.3g} GB, "
                 f"weights {self.weight_bytes / gb:.3g} GB")
        if device_available is not None and device != "cpu" and self.device_bytes() > device_available:
            return (f"the problem cannot be judged on this GPU: the judge needs about {self.device_bytes() / gb:.3g} GB of GPU "
                    f"memory for it ({shape}), the GPU has {device_available / gb:.3g} GB")
        if self.host_need_bytes(device) > host_available:
            return (f"the problem cannot be judged on this machine: the judge needs about {self.host_need_bytes(device) / gb:.3g} GB "
                    f"of host memory for it ({shape}), the machine has {host_available / gb:.3g} GB")
        return ""


def fitting_timed_sets(footprint: Footprint, device_available: int) -> int:
    """The most timed input sets, up to the footprint's own and at least 1, whose check fits `device_available` (a
    GPU that holds three copies of a 16 GB input beside the reference's holds two)."""
    timed = footprint.timed_sets
    while timed > 1 and dataclasses.replace(footprint, timed_sets=timed).device_bytes() > device_available:
        timed -= 1
    return timed


def problem_limits(footprint: Footprint, device: str, memory_gb: float | None = None) -> Limits:
    """A job's limits for a problem of known sizes: the default (half the machine, or the override), raised to what
    the footprint says one job holds, but never past the machine's memory. An explicit override is kept as is."""
    base = default_limits(memory_gb)
    if memory_gb is not None or os.environ.get(MEMORY_VARIABLE, "").strip():
        return base
    need = footprint.job_host_bytes(device)
    return Limits(max(base.memory_bytes, min(need, machine_memory_bytes())), base.processes, base.file_bytes)


def apply(limits: Limits, *, device: str, unprivileged: bool) -> None:
    """In the job, before any of its code: the address space (CPU jobs), the process count (when it runs as its
    own user), the file size. A write past the file limit fails (EFBIG) rather than killing the job."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_bytes, limits.file_bytes))
    if device == "cpu":
        mapped = _mapped_bytes()
        resource.setrlimit(resource.RLIMIT_AS, (mapped + limits.memory_bytes, mapped + limits.memory_bytes))
    if unprivileged:
        resource.setrlimit(resource.RLIMIT_NPROC, (limits.processes, limits.processes))


def _mapped_bytes() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def tree_rss_bytes(root: int) -> int:
    """Memory held by `root` and every process below it, as this process sees /proc: each process's proportional
    share (PSS), so pages that forked processes share are counted once, not once per process, and the memory files
    they hold open (a memfd's pages count whether mapped or not)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(name))
    total, todo, held = 0, [root], {}
    while todo:
        pid = todo.pop()
        total += _pss_bytes(pid)
        held.update(_memfd_bytes(pid))
        todo.extend(children.get(pid, ()))
    return total + sum(held.values())


def _memfd_bytes(pid: int) -> dict[tuple[int, int], int]:
    """The memory files a process holds open (memfd_create: pages of the machine's memory that no process's PSS
    counts while unmapped, and no address-space limit bounds), by (device, inode) so a file shared is counted once."""
    found: dict[tuple[int, int], int] = {}
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return found
    for fd in fds:
        try:
            if not os.readlink(f"/proc/{pid}/fd/{fd}").startswith("/memfd:"):
                continue
            info = os.stat(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        found[(info.st_dev, info.st_ino)] = info.st_blocks * 512
    return found


def folder_bytes(folder: str, skip: frozenset[str] = frozenset({".root"}), most: int = 20_000) -> int:
    """Bytes of the regular files under `folder` (a job folder on /dev/shm is the machine's memory too), at most
    `most` entries looked at; `skip`: the folders directly in `folder` not to enter (a job's new root holds the
    system's mounts; a folder of that name deeper down is the job's own and counts)."""
    total, seen, todo = 0, 0, [folder]
    while todo and seen < most:
        current = todo.pop()
        try:
            entries = list(os.scandir(current))
        except OSError:
            continue
        for entry in entries:
            seen += 1
            try:
                if entry.is_dir(follow_symlinks=False):
                    if not (current == folder and entry.name in skip):
                        todo.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_size
            except OSError:
                continue
    return total


def _pss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:  # no smaps_rollup (an old kernel): resident pages, shared ones counted in each process
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * _PAGE
    except OSError:
        return 0


_PAGE = os.sysconf("SC_PAGE_SIZE")
