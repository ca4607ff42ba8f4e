"""The limits every job runs under, and the parent's watch on its memory.

- Memory: the parent sums the memory of the job's processes (their proportional shares) (its own view of /proc, which no job can
  change) every tenth of a second and ends the job past its limit: `runtime_error: over the memory limit of N GB`.
  A job on the CPU also gets an address-space limit of that much beyond what torch maps at its start, so a single
  huge allocation fails at once inside the job instead of reaching the machine's OOM killer. (A GPU job keeps no
  address-space limit: CUDA reserves far more address space than it uses.)
- Processes: a job run as `nobody` may have at most `processes` of that user's processes and threads.
- Files: no file a job writes grows beyond `file_bytes`; its printed output is capped by the fork server's log
  relay (pipeline.judge.forkserver.Log).

Defaults come from the machine (half its memory); `EGG_JOB_MEMORY_GB` or EvalOptions.memory_limit_gb override.

Imports: the standard library only (the fork server's children apply these).
"""

from __future__ import annotations

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
