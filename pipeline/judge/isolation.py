"""Isolation at run time: a job's processes see no other process of the machine and no file outside their job.

A candidate (or a problem file someone pasted) runs in a forked child of the fork server. Before any of its code
runs, `enter()` puts that child in:
- new PID, mount, network and IPC namespaces, with a fresh /proc: no ancestor, sibling or other job is visible,
  so no `/proc/<pid>/environ` of the CLI, the app or the session worker can be read;
- a new root file system (a tmpfs, then `pivot_root`) holding only what the job needs, read-only: the system
  folders (/usr, /etc, /lib...), the Python installation and its import path, egg's `pipeline` package (not the
  repository around it), the problem and candidate files; writable: the job folder and the compile caches of this
  candidate, and a private /tmp and /dev/shm that vanish with the job. The user's home, egg's config, `.env` and
  `.netrc` files, the store and the reference cache are simply not there. /dev is the machine's (the GPU's device
  files stay usable);
- an unprivileged uid of its own (never a real user's) when egg runs as root, with no_new_privs and a system
  call filter (no new user namespace, no AF_VSOCK, io_uring, bpf or userfaultfd); as a normal user, a user namespace gives
  the same namespaces without the uid change.

Whatever the kernel refuses is recorded (`Report.missing`) and the job runs with what it got: the verdict names
the missing protections and the judge prints a one-line warning, never silently. `make_undumpable()` is for egg's
own long-lived processes (CLI, app, session worker, fork server): their /proc files stop being readable by other
processes of the same user.

Imports: the standard library only (the fork server and the GPU worker load this module).
"""

from __future__ import annotations

import ctypes
import os
import platform
import re
import resource
import signal
import sys
from dataclasses import dataclass, field

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x20000, 0x08000000, 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_GET_DUMPABLE, PR_SET_NO_NEW_PRIVS = 1, 4, 3, 38
_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}  # syscall numbers (glibc has no wrapper)
SANDBOX_GID = 65534  # nogroup
# A job run by root gets a uid of its own, never a real user's: the base plus the host pid of the process that
# isolates it (alive for the whole job, so two jobs at once never share a uid and one job's process limit, counted
# per uid, cannot starve another).
SANDBOX_UID_BASE = 1 << 30
SANDBOX_UID_SPAN = 1 << 23  # above any pid_max (4194304)
OFF_VARIABLE = "EGG_ISOLATION"  # "off": run jobs unisolated (debugging; the verdict and a warning say so)
TMP_BYTES = 1 << 30  # a job's private /tmp and /dev/shm hold at most this much each (their pages are the machine's memory)

# System folders a job may read (each only if it exists); /dev, /proc, /tmp and /dev/shm are set up separately.
SYSTEM_READ_ONLY = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/sys")
# What the job's environment may keep of the fork server's (everything else, values included, is dropped).
_KEEP_NAMES = frozenset({
    "PATH", "LANG", "LANGUAGE", "TZ", "TERM", "PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE",
    "PYTHONHASHSEED", "EGG_PIPELINE_ROOT", "LD_LIBRARY_PATH", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
})
_KEEP_PREFIXES = ("LC_", "CUDA_", "NVIDIA_", "TRITON_", "TORCH_", "PYTORCH_", "CUBLAS_", "CUDNN_", "NCCL_", "NVSHMEM_")
_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL|AUTH", re.IGNORECASE)


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")


def make_undumpable() -> bool:
    """Mark this process undumpable (prctl PR_SET_DUMPABLE 0): its /proc/<pid>/environ, mem and fd become
    unreadable to other processes of the same user, and it writes no core dump. True if it took effect."""
    try:
        libc = _libc()
        return libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0 and libc.prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def disabled() -> bool:
    """True when the person running egg switched isolation off (EGG_ISOLATION=off)."""
    return os.environ.get(OFF_VARIABLE, "").strip().lower() in ("off", "0", "no", "false")


# The plan: what a job may see --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """One job's view of the machine. Paths are absolute; `environment` replaces the job's whole environment."""

    workdir: str
    read_only: tuple[str, ...] = ()
    read_write: tuple[str, ...] = ()
    environment: dict[str, str] = field(default_factory=dict)
    enabled: bool = True
    hidden: tuple[str, ...] = ()  # folders covered by an empty tmpfs if a read-only folder would show them
    tmp_bytes: int = TMP_BYTES  # the size of the job's private /tmp and /dev/shm (memory they take from the machine)

    def to_json(self) -> dict:
        return {"workdir": self.workdir, "read_only": list(self.read_only), "read_write": list(self.read_write),
                "environment": dict(self.environment), "enabled": self.enabled, "hidden": list(self.hidden),
                "tmp_bytes": self.tmp_bytes}

    @classmethod
    def from_json(cls, data: dict) -> Plan:
        return cls(data["workdir"], tuple(data["read_only"]), tuple(data["read_write"]), dict(data["environment"]),
                   data["enabled"], tuple(data.get("hidden", ())), int(data.get("tmp_bytes", TMP_BYTES)))


def python_paths(exclude: tuple[str, ...] = ()) -> list[str]:
    """What this interpreter reads: its prefixes, the real folder of its executable, its import path and
    LD_LIBRARY_PATH; left out: the current folder, each folder of `exclude` and every folder that holds one (a
    virtual environment inside an excluded folder stays)."""
    paths = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, os.path.dirname(os.path.realpath(sys.executable))]
    paths += [p for p in sys.path if p and os.path.isabs(p)]
    paths += [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if os.path.isabs(p)]
    cwd = os.getcwd()
    kept = []
    for path in paths:
        path = os.path.abspath(path)
        if path == cwd or not os.path.exists(path) or any(_within(e, path) for e in exclude):
            continue
        kept.append(path)
    return kept


def looks_secret(name: str) -> bool:
    """A variable whose name holds KEY, TOKEN, SECRET, PASSWORD, CREDENTIAL or AUTH."""
    return bool(_SECRET.search(name))


def job_environment(source: dict[str, str], *, home: str, caches: dict[str, str]) -> dict[str, str]:
    """The fork server's environment cut down to what a job needs (by name, then never a secret-looking name),
    with HOME, TMPDIR and the compile caches pointed into the job's own folders."""
    env = {k: v for k, v in source.items() if (k in _KEEP_NAMES or k.startswith(_KEEP_PREFIXES)) and not _SECRET.search(k)}
    env.update({"HOME": home, "TMPDIR": "/tmp", "USER": "egg-sandbox", "LOGNAME": "egg-sandbox", "TRITON_HOME": home})
    env.update(caches)
    return env


def minimal_paths(paths: list[str]) -> list[str]:
    """The paths with every one that lies inside another dropped (so each folder is mounted once)."""
    kept: list[str] = []
    for path in sorted(set(paths), key=lambda p: (p.count("/"), p)):
        if not any(_within(path, k) for k in kept):
            kept.append(path)
    return kept


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


# Entering the sandbox (in the forked child) -------------------------------------------------------------------------


class IsolationError(RuntimeError):
    """The job cannot be isolated as it must be (it would run as root): it is not run."""


@dataclass
class Report:
    """What a job got. `missing` names each protection the machine refused, with the reason."""

    got: dict[str, str] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)

    def text(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.got.items())

    def to_json(self) -> dict:
        return {"isolation": self.text(), "missing": list(self.missing)}


def enter(plan: Plan, prepare=None) -> Report:
    """Isolate the calling process (a freshly forked, single-threaded child) as `plan` says, and return what it got.

    Forks once more for the PID namespace: the process that called this waits for the job and ends as the job
    ends (same exit code, same killing signal); `enter` returns only in the job. `prepare()` runs in the job once it
    has its own /proc but before the root changes and privileges drop (the GPU worker opens the device there)."""
    report = Report()
    host_pid = os.getpid()
    os.makedirs(os.path.join(plan.workdir, "home"), exist_ok=True)
    if not plan.enabled:
        report.got["isolation"] = "off"
        report.missing.append(f"isolation switched off ({OFF_VARIABLE}=off)")
        if prepare is not None:
            prepare()
        _finish(plan)
        return report
    root = os.geteuid() == 0
    flags = _unshare(report, root)
    if flags & CLONE_NEWPID:
        _become_namespace_init()
    libc = _libc()
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if flags & CLONE_NEWNET:
        _loopback_up(report)
    if flags & CLONE_NEWIPC and root:
        _bound_ipc(plan.tmp_bytes, report)
    private = False
    if flags & CLONE_NEWNS:
        try:
            _check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "making mounts private")
            if flags & CLONE_NEWPID:
                _check(libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV, None), "mounting /proc")
            private = True
        except OSError as exc:
            report.missing.append(f"private mounts ({exc.strerror})")
    if prepare is not None:
        prepare()
    if private:
        _jail(plan, report)
    else:
        report.got["filesystem"] = "shared"
        report.missing.append("own file system view (no mount namespace): files outside the job stay readable")
    _drop_privileges(plan, report, root, sandbox_uid(host_pid))
    _restrict_syscalls(report)
    _finish(plan)
    return report


def sandbox_uid(host_pid: int) -> int:
    """The uid a job isolated by the process `host_pid` runs as (when egg runs as root)."""
    return SANDBOX_UID_BASE + host_pid % SANDBOX_UID_SPAN


def is_sandbox_uid(uid: int) -> bool:
    return SANDBOX_UID_BASE <= uid < SANDBOX_UID_BASE + SANDBOX_UID_SPAN


def _unshare(report: Report, root: bool) -> int:
    """New namespaces, as many as the kernel grants; as a normal user inside a new user namespace."""
    libc = _libc()
    base = CLONE_NEWNS | CLONE_NEWPID
    extra = CLONE_NEWNET | CLONE_NEWIPC
    user = 0 if root else CLONE_NEWUSER
    uid, gid = os.getuid(), os.getgid()
    for flags in (base | extra | user, base | user, CLONE_NEWNS | user):
        if libc.unshare(flags) == 0:
            if user and not _map_user(uid, gid):
                report.missing.append("user namespace id mapping")
            break
        last = ctypes.get_errno()
    else:
        report.got.update(pid_namespace="no", network_namespace="no")
        report.missing.append(f"namespaces ({os.strerror(last)}): other processes and their /proc files stay visible")
        return 0
    report.got["pid_namespace"] = "yes" if flags & CLONE_NEWPID else "no"
    report.got["network_namespace"] = "yes" if flags & CLONE_NEWNET else "no"
    if user:
        report.got["user_namespace"] = "yes"
    if not flags & CLONE_NEWPID:
        report.missing.append("PID namespace: other processes and their /proc files stay visible")
    if not flags & CLONE_NEWNET:
        report.missing.append("network namespace")
    return flags


def _loopback_up(report: Report) -> None:
    """Bring up the new network namespace's own loopback: a job's processes may talk to each other (NCU's host
    and its target do), and still reach nothing outside the namespace."""
    import fcntl
    import socket
    import struct

    get_flags, set_flags, up = 0x8913, 0x8914, 0x1  # SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            flags = struct.unpack("16sH14s", fcntl.ioctl(s, get_flags, struct.pack("16sH14s", b"lo", 0, b"")))[1]
            fcntl.ioctl(s, set_flags, struct.pack("16sH14s", b"lo", flags | up, b""))
    except OSError as exc:
        report.missing.append(f"loopback in the network namespace ({exc.strerror})")


def _bound_ipc(total_bytes: int, report: Report) -> None:
    """The job's own IPC namespace holds System V shared memory and message queues that no process's PSS counts
    while unattached: bounded like its /dev/shm (`total_bytes` of shared memory in all, a few small queues)."""
    page = os.sysconf("SC_PAGE_SIZE")
    values = {"kernel/shmmax": total_bytes, "kernel/shmall": total_bytes // page, "kernel/shmmni": 64,
              "kernel/msgmni": 16, "kernel/msgmnb": 65536, "kernel/msgmax": 8192}
    for name, value in values.items():
        try:
            with open(f"/proc/sys/{name}", "w") as f:
                f.write(str(value))
        except OSError as exc:
            report.missing.append(f"IPC limit {name} ({exc.strerror})")
            return


def _map_user(uid: int, gid: int) -> bool:
    try:
        for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
        return True
    except OSError:
        return False


def _become_namespace_init() -> None:
    """Fork into the new PID namespace: its PID 1 is a small init that reaps and reports, and the job is PID 2 (PID
    1 ignores the signals it does not handle, a crash's SIGSEGV raised by the job itself among them). The process
    that called this waits and then ends exactly as the job ended (same exit code, same killing signal)."""
    read_end, write_end = os.pipe()
    init = os.fork()
    if init == 0:
        os.close(read_end)
        _namespace_init(write_end)  # returns in the job only
        return
    os.close(write_end)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the job's crash is passed on without a core file here
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda s, f: os.kill(init, signal.SIGKILL))
    report = b""
    while chunk := os.read(read_end, 64):
        report += chunk
    _wait(init)
    status = int(report) if report.strip().isdigit() else None
    if status is None:
        os._exit(70)  # the init died before the job ended (killed): no status to pass on
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 70)


def _namespace_init(report_fd: int) -> None:
    """PID 1: fork the job, reap every process of the namespace, and report the job's wait status."""
    _libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    job = os.fork()
    if job == 0:
        os.close(report_fd)
        return
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(70)
        except InterruptedError:
            continue
        if pid == job:
            os.write(report_fd, str(status).encode())
            os._exit(0)


def _wait(pid: int) -> int:
    while True:
        try:
            return os.waitpid(pid, 0)[1]
        except InterruptedError:
            continue


def _jail(plan: Plan, report: Report) -> None:
    """Build the job's root file system in a tmpfs and switch to it; recorded as missing if the kernel refuses."""
    libc = _libc()
    new_root = os.path.join(plan.workdir, ".root")  # inside the job folder: writable even without root
    try:
        os.makedirs(new_root, mode=0o755, exist_ok=True)
        _check(libc.mount(b"tmpfs", new_root.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=755"), "tmpfs for the new root")
        for op, source, target in _mount_plan(plan):
            _place(libc, op, source, new_root + target, plan.tmp_bytes)
        _switch_root(libc, new_root, report)
    except OSError as exc:
        report.got["filesystem"] = "shared"
        report.missing.append(f"own file system view ({exc}): files outside the job stay readable")


def _mount_plan(plan: Plan) -> list[tuple[str, str, str]]:
    """(operation, source, target) in an order where every parent comes before what is mounted inside it."""
    ops: list[tuple[str, str, str]] = []
    for path in minimal_paths([p for p in (*SYSTEM_READ_ONLY, *plan.read_only) if os.path.lexists(p)]):
        if os.path.islink(path) and os.path.dirname(path) == "/":
            ops.append(("symlink", os.readlink(path), path))  # /bin -> usr/bin on merged-/usr systems
        else:
            ops.append(("ro", path, path))
    shown = [op[2] for op in ops]
    # e.g. a repository inside /usr, or a home folder inside a bound one: covered, then what is needed bound back
    ops += [("tmpfs", "", path) for path in plan.hidden if any(_within(path, s) and path != s for s in shown)]
    # /dev/pts covered: the machine's pseudo-terminals are a shared, limited pool (kernel.pty.max) a job has no use for
    ops += [("dev", "/dev", "/dev"), ("tmpfs", "", "/dev/shm"), ("empty", "", "/dev/pts"), ("proc", "", "/proc")]
    ops.append(("tmpfs", "", "/tmp"))  # private and gone with the job, like /dev/shm
    ops += [("rw", path, path) for path in (plan.workdir, *plan.read_write)]
    return sorted(ops, key=lambda op: op[2].count("/") - (op[2] == "/"))


def _place(libc: ctypes.CDLL, op: str, source: str, target: str, tmp_bytes: int = TMP_BYTES) -> None:
    if op == "symlink":
        os.symlink(source, target)
        return
    is_dir = op in ("dev", "tmpfs", "proc", "empty") or os.path.isdir(source)
    if is_dir:
        os.makedirs(target, mode=0o755, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
        if not os.path.exists(target):
            open(target, "a").close()
    t = target.encode()
    if op == "tmpfs":
        _check(libc.mount(b"tmpfs", t, b"tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,size={tmp_bytes}".encode()), f"tmpfs on {target}")
    elif op == "empty":  # an empty, read-only folder over what is there
        _check(libc.mount(b"tmpfs", t, b"tmpfs", MS_NOSUID | MS_NODEV | MS_RDONLY, b"mode=755,size=4096"), f"an empty {target}")
    elif op == "proc":
        _check(libc.mount(b"proc", t, b"proc", MS_NOSUID | MS_NODEV, None), "a fresh /proc")
    else:  # read-only folders with what is mounted inside them; a writable one alone (the new root lies in one)
        _check(libc.mount(source.encode(), t, None, MS_BIND | (MS_REC if op in ("ro", "dev") else 0), None), f"bind {source}")
        if op != "dev":  # /dev keeps its flags: the GPU's device files must stay usable
            flags = MS_BIND | MS_REMOUNT | MS_NOSUID | _kept_flags(source) | (MS_RDONLY if op == "ro" else 0)
            _check(libc.mount(None, t, None, flags, None), f"remount {source}")
        if op == "ro":
            _read_only_below(libc, target)


def _read_only_below(libc: ctypes.CDLL, target: str) -> None:
    """Every mount a recursive bind brought in under `target` made read-only too (a bind remount changes one
    mount: /sys/fs/cgroup and the like would stay writable). One that refuses keeps its own flags."""
    for point in mount_points():
        if point.startswith(target.rstrip("/") + "/"):
            try:
                flags = MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | _kept_flags(point)
            except OSError:
                continue
            libc.mount(None, point.encode(), None, flags, None)


def mount_points() -> list[str]:
    """The mount points of this process's mount namespace, from /proc/self/mountinfo (octal escapes undone)."""
    try:
        with open("/proc/self/mountinfo") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    points = []
    for line in lines:
        fields = line.split()
        if len(fields) > 4:
            points.append(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4]))
    return points


def _kept_flags(path: str) -> int:
    """The flags of the mount holding `path` that a bind remount must repeat (in a user namespace the kernel
    refuses to clear them)."""
    st = os.statvfs(path).f_flag
    flags = 0
    for st_flag, ms_flag in ((os.ST_NODEV, MS_NODEV), (os.ST_NOEXEC, 8), (os.ST_NOATIME, 1024),
                             (os.ST_NODIRATIME, 2048), (os.ST_RELATIME, 1 << 21), (os.ST_RDONLY, MS_RDONLY)):
        if st & st_flag:
            flags |= ms_flag
    return flags


def _switch_root(libc: ctypes.CDLL, new_root: str, report: Report) -> None:
    number = _PIVOT_ROOT.get(platform.machine())
    old = os.path.join(new_root, ".old-root")
    os.makedirs(old, exist_ok=True)
    if number is not None and libc.syscall(number, new_root.encode(), old.encode()) == 0:
        os.chdir("/")
        _check(libc.umount2(b"/.old-root", MNT_DETACH), "detaching the old root")
        os.rmdir("/.old-root")
        report.got["filesystem"] = "own_root"
        return
    os.chdir(new_root)  # no pivot_root (an initramfs root, say): chroot, which dropping root makes final
    os.chroot(".")
    os.chdir("/")
    report.got["filesystem"] = "chroot"


def _drop_privileges(plan: Plan, report: Report, root: bool, uid: int) -> None:
    libc = _libc()
    if root:
        # What the job may write becomes its own; a file that cannot be handed over stays root's (the job cannot
        # write it), never a reason to keep root: a job that cannot drop root does not run.
        for path in (plan.workdir, *plan.read_write):
            _chown_tree(path, uid)
        try:
            os.setgroups([])
            os.setgid(SANDBOX_GID)
            os.setuid(uid)
        except OSError as exc:
            raise IsolationError(f"the job could not leave root ({exc.strerror}); it is not run") from exc
        if os.getuid() == 0 or os.geteuid() == 0:
            raise IsolationError("the job is still root after setuid; it is not run")
        report.got["uid"] = str(uid)
    else:
        report.got["uid"] = f"{os.getuid()} (egg's own; egg does not run as root)"
    ok = libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
    report.got["no_new_privs"] = "yes" if ok else "no"
    if not ok:
        report.missing.append("no_new_privs")


# System calls a job has no use for and that widen what it can reach (seccomp) ------------------------------------

SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO = 0x7FFF0000, 0x00050000
SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC = 1, 1
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
AF_VSOCK = 40
_X32_BIT = 0x40000000
# Per architecture: (AUDIT_ARCH, seccomp, clone, clone3, unshare, socket, io_uring_setup, bpf, userfaultfd,
# keyctl, add_key, request_key).
_SYSCALLS = {
    "x86_64": (0xC000003E, 317, 56, 435, 272, 41, 425, 321, 323, 250, 248, 249),
    "aarch64": (0xC00000B7, 277, 220, 435, 97, 198, 425, 280, 282, 219, 217, 218),
}


def seccomp_program(machine: str) -> bytes | None:
    """The classic-BPF filter a job runs under on `machine` (None where egg has no numbers for it). Refused with
    EPERM: a new user namespace (unshare or clone with CLONE_NEWUSER: in it the job would be root again, a large
    kernel surface), an AF_VSOCK socket (the one socket family a network namespace does not cut off: it reaches the
    host and its virtual machines), io_uring, bpf and userfaultfd (kernel surface no kernel of a job needs), and
    the kernel's keyrings (a job would otherwise share the session keyring of the process that started it).
    clone3 answers ENOSYS, as container runtimes do, so the C library falls back to clone, whose flags the filter
    can read. x32 system calls (another way to name the same calls) and other architectures are refused."""
    import errno
    import struct

    numbers = _SYSCALLS.get(machine)
    if numbers is None:
        return None
    arch, _, clone, clone3, unshare, socket_nr, io_uring, bpf, userfaultfd, keyctl, add_key, request_key = numbers
    ld_w, ja, jeq, jset, jge, ret = 0x20, 0x05, 0x15, 0x45, 0x35, 0x06  # BPF_LD|W|ABS, BPF_JMP|JA, |JEQ|K, |JSET|K, |JGE|K, BPF_RET|K
    allow, eperm, enosys = SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | errno.EPERM, SECCOMP_RET_ERRNO | errno.ENOSYS
    arg0 = 16  # offsetof(struct seccomp_data, args[0]): its low 32 bits, little-endian
    program = [
        (ld_w, 0, 0, 4), (jeq, 1, 0, arch), (ret, 0, 0, eperm),  # another architecture's calls
        (ld_w, 0, 0, 0),
        (jge, 0, 1, _X32_BIT), (ret, 0, 0, eperm),  # x32 (x86_64's second numbering)
        (jeq, 0, 1, clone3), (ret, 0, 0, enosys),
        (jeq, 2, 0, unshare), (jeq, 1, 0, clone), (ja, 0, 0, 3),  # unshare or clone: read their flags
        (ld_w, 0, 0, arg0), (jset, 0, 12, CLONE_NEWUSER), (ret, 0, 0, eperm),
        (jeq, 0, 3, socket_nr),
        (ld_w, 0, 0, arg0), (jeq, 0, 8, AF_VSOCK), (ret, 0, 0, eperm),
        (jeq, 5, 0, io_uring), (jeq, 4, 0, bpf), (jeq, 3, 0, userfaultfd), (jeq, 2, 0, keyctl), (jeq, 1, 0, add_key),
        (jeq, 0, 1, request_key), (ret, 0, 0, eperm),
        (ret, 0, 0, allow),
    ]
    return b"".join(struct.pack("HBBI", *op) for op in program)


def _restrict_syscalls(report: Report) -> None:
    """Install `seccomp_program` on every thread of the job (the device may already have started threads), after
    no_new_privs; recorded as missing where the kernel or the architecture does not allow it."""
    program = seccomp_program(platform.machine())
    if program is None:
        report.got["seccomp"] = "no"
        report.missing.append(f"system call filter (no seccomp numbers for {platform.machine()})")
        return
    buffer = ctypes.create_string_buffer(program, len(program))

    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = Fprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    libc = _libc()
    number = _SYSCALLS[platform.machine()][1]
    if libc.syscall(number, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, ctypes.byref(fprog)) != 0 and \
            libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        report.got["seccomp"] = "no"
        report.missing.append(f"system call filter ({os.strerror(ctypes.get_errno())})")
        return
    report.got["seccomp"] = "yes"


def _chown_tree(path: str, uid: int) -> None:
    """Hand `path` and what lies below it, down to CHOWN_DEPTH folders, to `uid`: walked by directory descriptors,
    without recursion and never through a link, so a tree deeper than PATH_MAX (which a job can leave in a cache it
    keeps) is walked like any other. An entry that refuses, or lies deeper, stays root's: the job cannot write it."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        os.chown(path, uid, SANDBOX_GID, follow_symlinks=False)
        stack = [(os.open(path, flags), 0)]
    except OSError:
        return
    while stack:
        folder, depth = stack.pop()
        try:
            with os.scandir(folder) as listing:
                entries = [(e.name, e.is_dir(follow_symlinks=False)) for e in listing]
        except OSError:
            entries = []
        for name, is_dir in entries:
            try:
                os.chown(name, uid, SANDBOX_GID, dir_fd=folder, follow_symlinks=False)
                if is_dir and depth < CHOWN_DEPTH:
                    stack.append((os.open(name, flags, dir_fd=folder), depth + 1))
            except OSError:
                continue
        os.close(folder)


CHOWN_DEPTH = 32  # compile caches are a few folders deep


def _finish(plan: Plan) -> None:
    if plan.environment:
        os.environ.clear()
        os.environ.update(plan.environment)
    os.chdir(plan.workdir)
    # A process that changed uid is undumpable, and so is one forked from the undumpable fork server: its own
    # /proc files then belong to root. The job may read its own /proc; it sees no process but its own.
    _libc().prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)


