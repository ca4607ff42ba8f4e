"""What the candidate's worker sets aside as Triton's own compiles (ptxas, the C compiler for a launcher) is only
ever Triton's tools, started by Triton's code, as Triton starts them: anything else started inside a compile keeps
the call's processes and CPU time on the candidate's account (the third red team's level-2 attempts). Each test runs
in a fresh process, as a worker does: an audit hook cannot be removed. A module in `starter/` stands for Triton's
code (the watch's `starter_dir`)."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

STARTER = """
import os, subprocess
def run(argv, **kwargs):
    return subprocess.run(argv, **kwargs)
def spawn(path, argv):
    os.waitpid(os.posix_spawn(path, argv, dict(os.environ)), 0)
"""


def run_script(tmp_path: Path, body: str) -> dict:
    (tmp_path / "starter").mkdir()
    (tmp_path / "starter" / "triton_like.py").write_text(STARTER)
    script = "import os, shutil, subprocess, sys, types\nsys.path.insert(0, sys.argv[1])\nfrom triton_like import run, spawn\n" \
             "from pipeline.judge.worker import ToolWatch, set_aside, triton_tools\n" + textwrap.dedent(body)
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "starter")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return ast.literal_eval(done.stdout.strip().splitlines()[-1])


def test_only_the_tools_started_as_triton_starts_them_are_set_aside(tmp_path):
    seen = run_script(tmp_path, """
        true = shutil.which("true")
        watch = ToolWatch.install(frozenset({true, os.path.realpath(true)}), starter_dir=sys.argv[1])
        seen = {}
        def foreign(start):
            with watch:
                start()
            return watch.foreign
        seen["the tool, by Triton's code"] = foreign(lambda: (run([true]), spawn(true, [true])))
        seen["another program"] = foreign(lambda: run(["echo"], stdout=subprocess.DEVNULL))
        seen["the tool, by the candidate's code"] = foreign(lambda: subprocess.run([true]))
        seen["the tool, posix_spawn by the candidate"] = foreign(lambda: os.waitpid(os.posix_spawn(true, [true], dict(os.environ)), 0))
        seen["the tool by a relative name"] = foreign(lambda: run(["true"]))
        seen["the tool with gcc's -wrapper"] = foreign(lambda: run([true, "-wrapper", "/bin/sh,-c,x"]))
        seen["the tool with LD_PRELOAD"] = foreign(lambda: run([true], env={**os.environ, "LD_PRELOAD": "x.so"}))
        seen["the tool with another PATH"] = foreign(lambda: run([true], env={**os.environ, "PATH": "/nowhere"}))
        seen["a shell"] = foreign(lambda: os.system("true"))
        seen["a fork"] = foreign(lambda: os.waitpid(pid, 0) if (pid := os.fork()) else os._exit(0))
        with watch:
            with watch:
                run(["echo"], stdout=subprocess.DEVNULL)
            run([true])
        seen["nested, foreign inside"] = watch.foreign
        seen["a fresh entry"] = foreign(lambda: None)
        seen["triton's ptxas is a tool"] = any(p.endswith("ptxas") for p in triton_tools())
        print(seen)
    """)
    assert seen == {"the tool, by Triton's code": False, "another program": True, "the tool, by the candidate's code": True,
                    "the tool, posix_spawn by the candidate": True,
                    "the tool by a relative name": True, "the tool with gcc's -wrapper": True, "the tool with LD_PRELOAD": True,
                    "the tool with another PATH": True, "a shell": True, "a fork": True, "nested, foreign inside": True,
                    "a fresh entry": False, "triton's ptxas is a tool": True}


def test_a_compile_s_cpu_time_is_set_aside_only_when_clear_and_only_tools_ran(tmp_path):
    results = run_script(tmp_path, """
        sh = shutil.which("sh")
        watch = ToolWatch.install(frozenset({sh, os.path.realpath(sh)}), starter_dir=sys.argv[1])
        burn = [sh, "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done"]
        hooked = {"set": False}
        results = {}
        for name, other, hook in (("the tool", False, False), ("the tool, a hook set", False, True), ("another program too", True, False)):
            account = types.SimpleNamespace(compiler_processes=0, compiler_cpu_s=0.0)
            def compile_():
                run(burn)
                if other:
                    run(["echo"], stdout=subprocess.DEVNULL)
            hooked["set"] = hook
            set_aside(compile_, account, watch, lambda: not hooked["set"])()
            results[name] = account.compiler_cpu_s > 0
        account = types.SimpleNamespace(compiler_processes=0, compiler_cpu_s=0.0)
        started = subprocess.Popen(burn)  # the candidate's, started before the compile and reaped inside it
        set_aside(lambda: (started.wait(), run([sh, "-c", "true"])), account, watch, lambda: True)()
        results["a child of the candidate's reaped inside"] = account.compiler_cpu_s > 0
        print(results)
    """)
    assert results == {"the tool": True, "the tool, a hook set": False, "another program too": False,
                       "a child of the candidate's reaped inside": False}
