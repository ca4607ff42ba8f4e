"""egg's CLI in subprocesses against one database: how a script (or a person at a terminal) drives a session."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SOFTMAX = ROOT / "data" / "problems" / "tiny" / "level1" / "23_Softmax.py"
SOFTMAX_KERNEL = ROOT / "examples" / "candidates" / "softmax_triton.py"


class Egg:
    def __init__(self, db: Path, cwd: Path) -> None:
        self.db, self.cwd = db, cwd

    def run(self, *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "pipeline.cli", *args, "--db", str(self.db)]
        done = subprocess.run(command, capture_output=True, text=True, cwd=self.cwd, timeout=timeout, env={**os.environ, "COLUMNS": "200"})
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
        return done

    def json(self, *args: str) -> Any:
        return json.loads(self.run(*args, "--json").stdout)

    def start(self, problem: Path, *flags: str) -> str:
        first_line = self.run("session", "start", str(problem), *flags, "--detach", "--json").stdout.splitlines()[0]
        return json.loads(first_line)["id"]

    def show(self, session_id: str) -> dict[str, Any]:
        return self.json("session", "show", session_id)

    def open_gates(self, session_id: str) -> list[dict[str, Any]]:
        return self.json("gate", "list", session_id)

    def wait_gate(self, session_id: str, timeout_s: float = 300) -> dict[str, Any] | None:
        """The session's open gate once it has one; None once the session has ended."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            gates = self.open_gates(session_id)
            if gates:
                return gates[0]
            if self.show(session_id)["status"] in ("done", "failed", "cancelled"):
                return None
            time.sleep(0.3)
        raise AssertionError(f"session {session_id} reached no gate in {timeout_s} s: {self.show(session_id)}")

    def decide(self, session_id: str, gate_id: int, action: str, *, file: Path | None = None, feedback: str | None = None,
               check: bool = True) -> subprocess.CompletedProcess:
        args = ["gate", "decide", session_id, str(gate_id), action]
        if file is not None:
            args += ["--file", str(file)]
        if feedback is not None:
            args += ["--feedback", feedback]
        return self.run(*args, check=check)

    def wait_status(self, session_id: str, statuses: tuple[str, ...], timeout_s: float = 300) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            shown = self.show(session_id)
            if shown["status"] in statuses:
                return shown
            time.sleep(0.3)
        raise AssertionError(f"session {session_id} did not reach {statuses} in {timeout_s} s: {self.show(session_id)}")


def wait_gone(pid: int, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} still alive after {timeout_s} s")
