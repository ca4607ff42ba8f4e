"""Two sessions never time kernels on one GPU at once: the device lock is held across processes."""

from __future__ import annotations

import subprocess
import sys
import time

from pipeline.sessions.devicelock import DeviceLock

HOLD = """
import sys, time
from pipeline.sessions.devicelock import DeviceLock
with DeviceLock("cuda"):
    print("held", flush=True)
    time.sleep(float(sys.argv[1]))
"""


def test_a_second_process_waits_for_the_device_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("EGG_LOCK_DIR", str(tmp_path))
    holder = subprocess.Popen([sys.executable, "-c", HOLD, "1.5"], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    waited = []
    start = time.monotonic()
    with DeviceLock("cuda", on_wait=lambda: waited.append(time.monotonic() - start)):
        got = time.monotonic() - start
        assert holder.poll() is not None or got >= 1.0  # not before the holder let go
    holder.wait(timeout=10)
    assert len(waited) == 1 and waited[0] < 0.5 and got >= 1.0


def test_the_lock_is_reentrant_within_a_process_and_free_after(tmp_path, monkeypatch):
    monkeypatch.setenv("EGG_LOCK_DIR", str(tmp_path))
    lock, waited = DeviceLock("cuda", on_wait=lambda: waited.append(1)), []
    with lock, lock:
        pass
    with DeviceLock("cuda", on_wait=lambda: waited.append(1)):
        pass
    assert waited == []
