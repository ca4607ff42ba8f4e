"""Isolation at run time: a candidate reaches no secret and nothing outside its job, whatever its source does.

The escape fixtures (tests/fixtures/candidates/leak_*.py, escape_write.py) compute the right answer only if they saw
nothing. They are judged in a separate process started the way a person starts egg: with an API key in its
environment, a home folder holding egg's config and a ~/.netrc with the key, and a working folder with a `.env`.
Each must end `banned` (the static audit) or, with the audit switched off, `ok` (isolation alone), never
`mismatch`. The same fixtures judged without isolation do get `mismatch`: that is what shows they can see.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

import pipeline
from pipeline.judge import isolation

from .conftest import FIXTURES, TINY

NOBODY = 65534  # a normal user for the tests that need one

ROOT = pipeline.ROOT
SOFTMAX = TINY / "level1" / "23_Softmax.py"
KEY = "sk-egg-test-0123456789abcdef"
LEAKS = ["leak_ancestor_environ.py", "leak_all_environ.py", "leak_config_file.py", "leak_dotenv.py", "escape_write.py"]
MARKER = "egg-escape-marker"

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the full sandbox (uid drop) needs root, as in CI and on the H200")

DRIVER = textwrap.dedent('''
    import json, sys
    from pipeline.judge.judge import Judge
    from pipeline.judge.sandbox import WorkerPool
    from pipeline.problems.loader import load_candidate, load_problem
    from pipeline.types import EvalOptions, to_jsonable
    args = json.loads(sys.argv[1])
    device = args.get("device", "cpu")
    options = EvalOptions(device=device, correctness_trials=1, repeat_calls=0, compile_timeout_s=120, run_timeout_s=120, timing_trials=10,
                          warmup_ms=100, baselines=("eager",))
    auditor = {} if args["audit"] else {"auditor": lambda source, reference_dtypes=frozenset(): ()}
    with Judge(options, pool=WorkerPool(device, isolate=args["isolate"]), cache_dir=None, **auditor) as judge:
        results = [to_jsonable(judge.evaluate(load_problem(args["problem"]), load_candidate(c))) for c in args["candidates"]]
    print(json.dumps(results))
''')


@pytest.fixture
def person(tmp_path):
    """What a person's machine holds: a key in the environment, egg's config and ~/.netrc in home, a .env where
    they work. Returns (environment, working folder, folder of candidate copies)."""
    home, work, cands = tmp_path / "home", tmp_path / "work", tmp_path / "candidates"
    for folder in (home / ".config" / "egg", work, cands):
        folder.mkdir(parents=True)
    (home / ".config" / "egg" / "egg.yaml").write_text(f"llm:\n  api_key: {KEY}\n")
    (home / ".netrc").write_text(f"machine api.openai.com login me password {KEY}\n")
    (work / ".env").write_text(f"OPENAI_API_KEY={KEY}\n")
    (work / "egg.yaml").write_text(f"llm:\n  api_key: {KEY}\n")
    for name in LEAKS:
        shutil.copy(FIXTURES / "candidates" / name, cands / name)
    env = dict(os.environ, OPENAI_API_KEY=KEY, ANTHROPIC_API_KEY=KEY, HOME=str(home))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    yield env, work, cands
    _remove_markers(cands)


def _marker_places(cands: Path) -> list[Path]:
    return [Path(p) / MARKER for p in ("/tmp", "/var/tmp", "/dev/shm", "/root", str(ROOT), str(cands))]


def _remove_markers(cands: Path) -> None:
    for place in _marker_places(cands):
        for path in (place, Path(str(place) + "-pathlib")):
            path.unlink(missing_ok=True)


def judge_in_a_process(env, work, cands, *, audit: bool, isolate: bool, device: str = "cpu", problem: Path = SOFTMAX) -> dict[str, dict]:
    """Judge every escape fixture in a new process started as a person starts egg (the key in its environment)."""
    args = {"problem": str(problem), "candidates": [str(cands / n) for n in LEAKS], "audit": audit, "isolate": isolate, "device": device}
    run = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(args)], env=env, cwd=work, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return {Path(r["candidate"]["path"]).name: r for r in json.loads(run.stdout.strip().splitlines()[-1])}


@needs_root
def test_escape_fixtures_are_banned_by_the_static_audit(person):
    results = judge_in_a_process(*person, audit=True, isolate=True)
    for name, result in results.items():
        assert result["status"] == "banned", (name, result["reason"])
        assert result["reason"].startswith(("dynamic_code", "banned_import")), (name, result["reason"])


@needs_root
def test_isolation_alone_keeps_every_secret_and_every_write_inside_the_job(person):
    """The audit switched off: what the candidates can reach is up to the sandbox. All right, none wrote outside."""
    env, work, cands = person
    _remove_markers(cands)
    results = judge_in_a_process(env, work, cands, audit=False, isolate=True)
    for name, result in results.items():
        assert result["status"] == "ok", (name, result["reason"], result["log_tail"][-2000:])
        record = result["environment"]["isolation"]
        assert "pid_namespace=yes" in record and "filesystem=own_root" in record and "seccomp=yes" in record, record
        assert isolation.is_sandbox_uid(int(re.search(r"\buid=(\d+)", record).group(1))), record
        assert "isolation_missing" not in result["environment"]
    assert [p for p in _marker_places(cands) if p.exists() or Path(str(p) + "-pathlib").exists()] == []


@needs_root
def test_without_isolation_the_same_fixtures_see_the_secrets(person):
    """The control: unisolated (as egg ran before), every fixture finds what it looks for, and says so."""
    env, work, cands = person
    try:
        results = judge_in_a_process(env, work, cands, audit=False, isolate=False)
        for name, result in results.items():
            assert result["status"] == "mismatch", (name, result["reason"])
            assert "isolation=off" in result["environment"]["isolation"]
            assert any(f["name"] == "isolation_incomplete" for f in result["flags"])
        assert all(p.exists() for p in _marker_places(cands))
    finally:
        _remove_markers(cands)


@needs_root
def test_egg_check_with_a_key_set_bans_the_ancestor_walker(person):
    """The issue's measurement, through the CLI: `egg check` with OPENAI_API_KEY set."""
    env, work, cands = person
    run = subprocess.run([sys.executable, "-m", "pipeline.cli", "check", str(cands / "leak_ancestor_environ.py"), "--ref", str(SOFTMAX),
                          "--device", "cpu", "--json", "--trials", "1"], env=env, cwd=work, capture_output=True, text=True, timeout=600)
    result = json.loads(run.stdout)
    assert (run.returncode, result["status"]) == (1, "banned"), result["reason"]
    assert result["reason"].startswith(("dynamic_code", "banned_import")), result["reason"]
    assert KEY not in run.stdout and KEY not in run.stderr


def test_switching_isolation_off_is_never_silent(person):
    env, work, cands = person
    env = dict(env, EGG_ISOLATION="off")
    args = {"problem": str(SOFTMAX), "candidates": [str(FIXTURES / "candidates" / "softmax_ok.py")], "audit": True, "isolate": True}
    run = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(args)], env=env, cwd=work, capture_output=True, text=True, timeout=600)
    result = json.loads(run.stdout.strip().splitlines()[-1])[0]
    assert result["status"] == "ok"
    assert result["environment"]["isolation"] == "isolation=off"
    assert "EGG_ISOLATION=off" in result["environment"]["isolation_missing"]
    warnings = [line for line in run.stderr.splitlines() if line.startswith("egg: warning: candidate isolation incomplete")]
    assert len(warnings) == 1, run.stderr


# The sandbox itself, without the judge ------------------------------------------------------------------------------


def run_in_child(body, *, as_user: int | None = None) -> dict:
    """Run `body()` (returns JSON data) in a forked child, optionally as another uid first; its result."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(read_end)
            if as_user is not None:
                os.setgroups([])
                os.setgid(as_user)
                os.setuid(as_user)
                isolation._libc().prctl(isolation.PR_SET_DUMPABLE, 1, 0, 0, 0)
            out = body()
        except BaseException as exc:  # the test reads the failure
            out, code = {"error": repr(exc)}, 3
        with os.fdopen(write_end, "w") as f:
            f.write(json.dumps(out))
        os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end) as f:
        data = f.read()
    os.waitpid(pid, 0)
    return json.loads(data)


def look_around(plan: isolation.Plan, secret_dir: str) -> dict:
    report = isolation.enter(plan)
    seen = {"report": report.to_json(), "uid": os.getuid(), "pids": sorted(p for p in os.listdir("/proc") if p.isdigit())}
    seen["secret_dir_visible"] = os.path.exists(secret_dir)
    seen["root"] = sorted(os.listdir("/"))
    try:
        with open("/proc/1/environ", "rb") as f:
            seen["init_environ"] = f.read().decode(errors="replace")
    except OSError as exc:
        seen["init_environ"] = type(exc).__name__
    with open("/tmp/egg-isolation-test-inside", "w") as f:
        f.write("the job's own /tmp")
    seen["cwd"] = os.getcwd()
    return seen


def try_the_kernel_surface(plan: isolation.Plan) -> dict:
    """What a job may still ask of the kernel: a user namespace, AF_VSOCK, a writable mount below /sys, threads."""
    import ctypes
    import socket
    import threading

    report = isolation.enter(plan)
    libc = ctypes.CDLL(None, use_errno=True)
    seen = {"report": report.to_json(), "uid": os.getuid()}
    seen["unshare_user"] = "allowed" if libc.unshare(isolation.CLONE_NEWUSER) == 0 else os.strerror(ctypes.get_errno())
    try:
        socket.socket(isolation.AF_VSOCK, socket.SOCK_STREAM).close()
        seen["vsock"] = "allowed"
    except OSError as exc:
        seen["vsock"] = exc.strerror
    seen["writable_below_sys"] = [m for m in isolation.mount_points() if m.startswith("/sys/") and not os.statvfs(m).f_flag & os.ST_RDONLY]
    keyctl = {"x86_64": 250, "aarch64": 219}[os.uname().machine]
    seen["keyring"] = "allowed" if libc.syscall(keyctl, 0, -3, 0) >= 0 else os.strerror(ctypes.get_errno())  # the session keyring's id
    try:
        os.close(os.open("/dev/ptmx", os.O_RDWR | os.O_NOCTTY))
        seen["pty"] = "opened"
    except OSError as exc:
        seen["pty"] = type(exc).__name__
    ran = []
    thread = threading.Thread(target=lambda: ran.append("thread"))
    thread.start()
    thread.join()
    ran.append(subprocess.run(["/bin/sh", "-c", "echo shell"], capture_output=True, text=True).stdout.strip())
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # its own loopback still works
        s.bind(("127.0.0.1", 0))
    seen["ran"] = ran
    time.sleep(0.5)  # alive beside the other job
    return seen


@needs_root
def test_two_jobs_at_once_run_as_two_users_and_reach_no_more_of_the_kernel_than_they_need(tmp_path):
    """Each job its own uid (one job's process limit, counted per uid, cannot starve the other), no new user
    namespace, no AF_VSOCK socket, nothing writable below /sys, and threads, a shell and its loopback still work."""
    from concurrent.futures import ThreadPoolExecutor

    plans = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        plans.append(isolation.Plan(str(tmp_path / name), tuple(isolation.python_paths(exclude=(str(ROOT),))), (), {"PATH": "/usr/bin:/bin"}, True))
    with ThreadPoolExecutor(2) as pool:
        first, second = pool.map(lambda plan: run_in_child(lambda: try_the_kernel_surface(plan)), plans)
    for seen in (first, second):
        assert "error" not in seen, seen
        assert seen["report"]["missing"] == [] and "seccomp=yes" in seen["report"]["isolation"], seen
        assert isolation.is_sandbox_uid(seen["uid"]), seen
        assert seen["unshare_user"] == "Operation not permitted" and seen["vsock"] == "Operation not permitted", seen
        assert seen["keyring"] == "Operation not permitted" and seen["pty"] != "opened", seen
        assert seen["writable_below_sys"] == [], seen
        assert seen["ran"] == ["thread", "shell"], seen
    assert first["uid"] != second["uid"]


@needs_root
def test_a_cache_tree_deeper_than_path_max_still_leaves_the_job_without_root(tmp_path):
    """The seventh red team planted a tree longer than PATH_MAX in a cache the next job keeps: handing it over
    failed, and the job ran as root. Now the tree is walked by descriptors and the job runs as its own uid."""
    work, cache = tmp_path / "job", tmp_path / "cache"
    work.mkdir()
    cache.mkdir()
    folder = os.open(cache, os.O_RDONLY)
    for _ in range(120):  # 120 x 51 characters: over PATH_MAX (4096)
        os.mkdir("d" * 50, dir_fd=folder)
        deeper = os.open("d" * 50, os.O_RDONLY, dir_fd=folder)
        os.close(folder)
        folder = deeper
    os.close(folder)
    plan = isolation.Plan(str(work), tuple(isolation.python_paths(exclude=(str(ROOT),))), (str(cache),), {"PATH": "/usr/bin:/bin"}, True)

    def look() -> dict:
        report = isolation.enter(plan)
        return {"uid": os.getuid(), "missing": report.missing, "cache_mine": os.stat(cache).st_uid == os.getuid()}

    seen = run_in_child(look)
    assert "error" not in seen, seen
    assert isolation.is_sandbox_uid(seen["uid"]) and seen["missing"] == [] and seen["cache_mine"], seen


@needs_root
def test_system_v_shared_memory_in_a_job_is_bounded_like_its_dev_shm(tmp_path):
    """Unattached System V segments are in no process's PSS: the job's own IPC namespace holds at most its /dev/shm's
    size of them, and the machine's own limits are untouched."""
    import ctypes

    plan = isolation.Plan(str(tmp_path), tuple(isolation.python_paths(exclude=(str(ROOT),))), (), {"PATH": "/usr/bin:/bin"}, True,
                          tmp_bytes=64 << 20)

    def try_segments() -> dict:
        report = isolation.enter(plan)
        libc = ctypes.CDLL(None, use_errno=True)
        create = 0o1000 | 0o600  # IPC_CREAT
        return {"missing": report.missing, "big": libc.shmget(0, ctypes.c_size_t(128 << 20), create),
                "small": libc.shmget(0, ctypes.c_size_t(16 << 20), create) >= 0}

    host = Path("/proc/sys/kernel/shmmax").read_text()
    seen = run_in_child(try_segments)
    assert seen == {"missing": [], "big": -1, "small": True}, seen
    assert Path("/proc/sys/kernel/shmmax").read_text() == host


def test_the_system_call_filter_is_a_valid_program_for_both_architectures():
    """Every jump lands inside the program and it ends in a return (the kernel refuses anything else)."""
    import struct

    for machine in ("x86_64", "aarch64"):
        program = isolation.seccomp_program(machine)
        ops = [struct.unpack("HBBI", program[i:i + 8]) for i in range(0, len(program), 8)]
        for n, (code, jt, jf, k) in enumerate(ops):
            if code & 0x07 == 0x05:  # a jump
                targets = (n + 1 + k,) if code == 0x05 else (n + 1 + jt, n + 1 + jf)
                assert all(t < len(ops) for t in targets), (machine, n)
        assert ops[-1] == (0x06, 0, 0, isolation.SECCOMP_RET_ALLOW)
    assert isolation.seccomp_program("sparc") is None


@needs_root
def test_a_sandboxed_process_sees_itself_its_folder_and_nothing_else(tmp_path):
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / ".env").write_text(f"KEY={KEY}")
    work = tmp_path / "job"
    work.mkdir()
    plan = isolation.Plan(str(work), tuple(isolation.python_paths(exclude=(str(ROOT),))), (), {"PATH": "/usr/bin"}, True, (str(tmp_path),))
    seen = run_in_child(lambda: look_around(plan, str(secret)))
    assert seen["report"]["missing"] == [], seen
    assert isolation.is_sandbox_uid(seen["uid"]) and seen["uid"] != os.getuid()
    assert seen["pids"] == ["1", "2"]  # egg's own init and the job: no ancestor, no sibling
    assert seen["init_environ"] == "PermissionError"
    assert not seen["secret_dir_visible"] and "home" not in seen["root"]
    assert seen["cwd"] == str(work)
    assert not Path("/tmp/egg-isolation-test-inside").exists()  # its /tmp was its own, and is gone


def test_a_normal_user_gets_the_namespaces_through_a_user_namespace():
    """egg run by a normal user: no uid to drop to, but PID, mount and network namespaces all the same."""
    if os.geteuid() != 0:
        pytest.skip("the test becomes the normal user itself (it starts as root)")
    base = Path(tempfile.mkdtemp(prefix="egg-userns-", dir="/tmp"))
    try:
        os.chmod(base, 0o755)
        work = base / "job"
        work.mkdir()
        os.chown(work, NOBODY, isolation.SANDBOX_GID)
        plan = isolation.Plan(str(work), (), (), {"PATH": "/usr/bin"}, True)
        seen = run_in_child(lambda: look_around(plan, "/root"), as_user=NOBODY)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    if "error" in seen:
        pytest.fail(seen["error"])
    got = seen["report"]["isolation"]
    assert "user_namespace=yes" in got and "pid_namespace=yes" in got and "filesystem=own_root" in got, seen
    assert "does not run as root" in got
    assert seen["pids"] == ["1", "2"] and not seen["secret_dir_visible"]


def read_environ_of(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return "read" if f.read() is not None else "read"
    except OSError as exc:
        return type(exc).__name__


@needs_root
@pytest.mark.parametrize("undumpable, expected", [(False, "read"), (True, "PermissionError")])
def test_an_undumpable_process_hides_its_environment_from_its_own_user(undumpable, expected):
    """Two processes of one user (nobody): the second reads the first's /proc/<pid>/environ unless the first made
    itself undumpable (what egg's CLI, fork server, app and session worker do)."""
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.setgroups([])
        os.setgid(isolation.SANDBOX_GID)
        os.setuid(NOBODY)
        isolation._libc().prctl(isolation.PR_SET_DUMPABLE, 1, 0, 0, 0)
        if undumpable:
            assert isolation.make_undumpable()
        os.write(ready_w, b"x")
        time.sleep(30)
        os._exit(0)
    try:
        os.read(ready_r, 1)
        seen = run_in_child(lambda: read_environ_of(pid), as_user=NOBODY)
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    assert seen == expected


def test_the_job_environment_keeps_what_a_job_needs_and_nothing_secret():
    source = {"PATH": "/usr/bin", "OPENAI_API_KEY": "x", "TRITON_AUTH_TOKEN": "x", "DATABASE_URL": "postgres://u:p@h/db",
              "CUDA_VISIBLE_DEVICES": "0", "TRITON_INTERPRET": "1", "HOME": "/root", "EGG_PIPELINE_ROOT": "/r", "AWS_PROFILE": "me"}
    env = isolation.job_environment(source, home="/job/home", caches={"TRITON_CACHE_DIR": "/c/triton"})
    assert env == {"PATH": "/usr/bin", "CUDA_VISIBLE_DEVICES": "0", "TRITON_INTERPRET": "1", "EGG_PIPELINE_ROOT": "/r",
                   "HOME": "/job/home", "TMPDIR": "/tmp", "USER": "egg-sandbox", "LOGNAME": "egg-sandbox", "TRITON_HOME": "/job/home",
                   "TRITON_CACHE_DIR": "/c/triton"}
