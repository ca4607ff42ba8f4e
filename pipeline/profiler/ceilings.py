"""The device's own ceilings for the roofline: copy bandwidth and dense matmul rates (fp32, tf32, bf16).

Measured once per device and environment (GPU name, driver, torch), cached as JSON under
`<cache>/ceilings/<fingerprint>.json`. Without a GPU nothing can be measured: `nominal()` gives the numbers seen
on an H200 (FACTS.md section 4), and every report that uses them says so.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import subprocess
from pathlib import Path

from pipeline.profiler.cache import cache_root
from pipeline.profiler.report import Ceilings
from pipeline.types import from_jsonable, to_jsonable

COPY_BYTES = 1 << 30  # 1 GiB each way: far beyond the 60 MB L2
MATMUL_SIZE = 8192
TRIALS = 10


def nominal() -> Ceilings:
    """H200 numbers seen on the project's machine (copy, bf16 matmul) and its datasheet (fp32, tf32); not measured
    here."""
    return Ceilings(
        device="NVIDIA H200 (nominal)",
        sms=132,
        copy_bytes_per_s=4.3e12,
        matmul_flops_per_s={"fp32": 67e12, "tf32": 495e12, "bf16": 790e12},
        source="nominal",
    )


def fingerprint(device_index: int = 0) -> str:
    """GPU name, driver and torch/CUDA versions: ceilings measured under another fingerprint are not reused."""
    import torch

    name = torch.cuda.get_device_name(device_index)
    return f"{name} | driver {driver_version()} | torch {torch.__version__} | cuda {torch.version.cuda}"


def driver_version() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True, timeout=30, check=False)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def cache_path(fp: str, root: Path | None = None) -> Path:
    return (root or cache_root()) / "ceilings" / f"{hashlib.sha256(fp.encode()).hexdigest()[:24]}.json"


def load_or_measure(device_index: int = 0, root: Path | None = None) -> Ceilings:
    """The cached ceilings of this device and environment, measuring them (about 10 s) the first time."""
    fp = fingerprint(device_index)
    path = cache_path(fp, root)
    if path.exists():
        return from_jsonable(Ceilings, json.loads(path.read_text()))
    ceilings = measure(device_index, fp)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(to_jsonable(ceilings), indent=2))
    tmp.replace(path)
    return ceilings


def measure(device_index: int = 0, fp: str = "") -> Ceilings:
    """Measure copy bandwidth and matmul rates on a CUDA device (best of TRIALS, after a warm-up)."""
    import torch

    device = torch.device("cuda", device_index)
    props = torch.cuda.get_device_properties(device)
    return Ceilings(
        device=props.name,
        sms=props.multi_processor_count,
        copy_bytes_per_s=copy_bandwidth(device),
        matmul_flops_per_s={p: matmul_rate(device, p) for p in ("fp32", "tf32", "bf16")},
        source="measured",
        fingerprint=fp or fingerprint(device_index),
        measured_at=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    )


def _best_ms(fn, trials: int = TRIALS) -> float:
    import torch

    fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(trials):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end))
    return best


def copy_bandwidth(device) -> float:
    """Bytes read plus bytes written per second by a device-to-device copy of 1 GiB."""
    import torch

    src = torch.empty(COPY_BYTES // 4, dtype=torch.float32, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    ms = _best_ms(lambda: dst.copy_(src))
    return 2 * COPY_BYTES / (ms * 1e-3)


def matmul_rate(device, precision: str) -> float:
    """Dense FLOP/s of an 8192^3 cuBLAS matmul: fp32 with TF32 off, fp32 with TF32 on, or bf16."""
    import torch

    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    a = torch.randn(MATMUL_SIZE, MATMUL_SIZE, device=device, dtype=dtype)
    b = torch.randn(MATMUL_SIZE, MATMUL_SIZE, device=device, dtype=dtype)
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    try:
        ms = _best_ms(lambda: a @ b)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
    return 2 * MATMUL_SIZE**3 / (ms * 1e-3)
