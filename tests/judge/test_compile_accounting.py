"""What the candidate's worker sets aside as Triton's own compiles (ptxas, the C compiler for a launcher) is only
ever Triton's tools: a process of any other program started inside a compile keeps the call's processes and CPU
time on the candidate's account. The audit hook runs in a fresh process, as in a worker."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap


def test_only_the_tools_named_are_set_aside_and_any_other_start_is_foreign():
    script = textwrap.dedent("""
        import os, shutil, subprocess
        from pipeline.judge.worker import ToolWatch, triton_tools
        true = os.path.realpath(shutil.which("true"))
        watch = ToolWatch.install(frozenset({true}))
        seen = {}
        with watch:
            subprocess.run(["true"]); subprocess.run([true])
            os.waitpid(os.posix_spawn(true, [true], dict(os.environ)), 0)
        seen["the tool, three ways"] = watch.foreign
        for name, start in {
            "another program": lambda: subprocess.run(["echo"], stdout=subprocess.DEVNULL),
            "a shell": lambda: os.system("true"),
            "a shell through subprocess": lambda: subprocess.run([shutil.which("sh"), "-c", "true"]),
            "a fork": lambda: os.waitpid(pid, 0) if (pid := os.fork()) else os._exit(0),
        }.items():
            with watch:
                start()
            seen[name] = watch.foreign
        with watch:
            with watch:
                subprocess.run(["echo"], stdout=subprocess.DEVNULL)
            subprocess.run(["true"])
        seen["nested, foreign inside"] = watch.foreign
        subprocess.run(["echo"], stdout=subprocess.DEVNULL)  # outside any compile: not the watch's business
        with watch:
            pass
        seen["a fresh entry"] = watch.foreign
        tools = triton_tools()
        seen["triton's ptxas is a tool"] = any(p.endswith("ptxas") for p in tools)
        print(seen)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    seen = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    assert seen == {"the tool, three ways": False, "another program": True, "a shell": True,
                    "a shell through subprocess": True, "a fork": True, "nested, foreign inside": True, "a fresh entry": False,
                    "triton's ptxas is a tool": True}


def test_a_compile_s_cpu_time_is_set_aside_only_when_clear_and_only_tools_ran():
    script = textwrap.dedent("""
        import os, shutil, subprocess, types
        from pipeline.judge.worker import ToolWatch, set_aside
        sh = os.path.realpath(shutil.which("sh"))
        watch = ToolWatch.install(frozenset({sh}))
        burn = [sh, "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done"]
        hooked = {"set": False}
        results = {}
        for name, argv, hook in (("the tool", burn, False), ("the tool, a hook set", burn, True),
                                 ("another program too", None, False)):
            account = types.SimpleNamespace(compiler_processes=0, compiler_cpu_s=0.0)
            def compile_():
                subprocess.run(burn)
                if argv is None:
                    subprocess.run(["echo"], stdout=subprocess.DEVNULL)
            hooked["set"] = hook
            set_aside(compile_, account, watch, lambda: not hooked["set"])()
            results[name] = account.compiler_cpu_s > 0
        print(results)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    results = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    assert results == {"the tool": True, "the tool, a hook set": False, "another program too": False}
