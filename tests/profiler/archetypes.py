"""Synthetic NCU metric rows (base units) for kernels of known character on an H200, and an NCU-format CSV writer.

The numbers follow what these kernels do on a 132-SM H200 (4.3 TB/s), and the CSV is written the way Nsight
Compute 2025.3 writes it (units row, "ns" for durations, thousands separators), as in the captures of
`bench/profile_h200.py` (tests/fixtures/ncu/h200_*.csv).
"""

from __future__ import annotations

from pipeline.profiler import counters as C

INFO_COLUMNS = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size", "Grid Size", "Device", "CC")


def _base(duration_s: float, grid: int, block: int, regs: int, smem_dyn: int = 0, smem_static: int = 0) -> dict[str, float]:
    warps = -(-block // 32)
    regs_per_warp = -(-regs * 32 // 256) * 256
    return {
        C.DURATION: duration_s,
        C.GRID_SIZE: grid,
        C.BLOCK_SIZE: block,
        C.REGISTERS: regs,
        C.SHARED_DYNAMIC: smem_dyn,
        C.SHARED_STATIC: smem_static,
        C.LIMIT_REGISTERS: (65536 // regs_per_warp) // warps,
        C.LIMIT_SHARED: 32 if not (smem_dyn + smem_static) else 233472 // (smem_dyn + smem_static + 1024),
        "gpc__cycles_elapsed.avg.per_second": 1.755e9,
    }


def copy() -> dict[str, float]:
    """A 1 GiB fp32 copy: DRAM at ~92% of peak, nothing else busy."""
    m = _base(520e-6, 65536, 256, 32)
    m.update({
        C.DRAM_READ: 1.074e9, C.DRAM_WRITE: 1.074e9, C.SM_PCT: 14.8, C.MEMORY_PCT: 92.3, C.DRAM_PCT: 92.3,
        C.L1_PCT: 28.0, C.L2_PCT: 46.1, C.L2_HIT: 50.2, C.ACHIEVED_OCC: 86.0, C.THEORETICAL_OCC: 100.0, C.WAVES: 62.1,
        C.ISSUE_PCT: 9.0, C.TENSOR_PCT: 0.0, C.GMMA_INSTS: 0.0, C.FMA_PCT: 0.4, C.ALU_PCT: 1.2, C.COALESCING: 100.0,
        C.BANK_LD: 0.0, C.BANK_ST: 0.0, C.FFMA: 0.0,
        C.STALL_PREFIX + "long_scoreboard" + C.STALL_SUFFIX: 28.4, C.STALL_PREFIX + "lg_throttle" + C.STALL_SUFFIX: 6.1,
        C.STALL_PREFIX + "wait" + C.STALL_SUFFIX: 0.9,
    })  # fmt: skip
    return m


def gemm() -> dict[str, float]:
    """8192^3 fp16 on wgmma: SM at ~85%, tensor pipe busy; occupancy low (12.5%) but the pipe is saturated."""
    m = _base(1.62e-3, 2048, 256, 204, 147456)  # static 0: the reserved 1 KiB is the driver's, not static
    m.update({
        C.DRAM_READ: 6.1e8, C.DRAM_WRITE: 1.3e8, C.SM_PCT: 85.2, C.MEMORY_PCT: 47.9, C.DRAM_PCT: 10.5,
        C.L1_PCT: 47.9, C.L2_PCT: 30.2, C.L2_HIT: 88.0, C.ACHIEVED_OCC: 12.4, C.THEORETICAL_OCC: 12.5, C.WAVES: 15.5,
        C.ISSUE_PCT: 14.0, C.TENSOR_PCT: 84.9, C.GMMA_INSTS: 2.1e7, C.FMA_PCT: 3.1, C.ALU_PCT: 2.0, C.COALESCING: 100.0,
        C.BANK_LD: 0.0, C.BANK_ST: 1.2e5, C.FFMA: 0.0,
        C.STALL_PREFIX + "gmma" + C.STALL_SUFFIX: 3.2, C.STALL_PREFIX + "long_scoreboard" + C.STALL_SUFFIX: 0.6,
    })  # fmt: skip
    return m


def chase() -> dict[str, float]:
    """Dependent gathers in 1-warp blocks at 156 registers: occupancy 18.75% (registers), memory at ~25%."""
    m = _base(310e-6, 6336, 32, 156, 512)
    m.update({
        C.DRAM_READ: 1.9e8, C.DRAM_WRITE: 1.0e8, C.SM_PCT: 9.5, C.MEMORY_PCT: 24.7, C.DRAM_PCT: 21.8,
        C.L1_PCT: 18.3, C.L2_PCT: 24.7, C.L2_HIT: 12.0, C.ACHIEVED_OCC: 17.9, C.THEORETICAL_OCC: 18.75, C.WAVES: 4.0,
        C.ISSUE_PCT: 6.0, C.TENSOR_PCT: 0.0, C.GMMA_INSTS: 0.0, C.FMA_PCT: 7.7, C.ALU_PCT: 2.2, C.COALESCING: 12.5,
        C.BANK_LD: 0.0, C.BANK_ST: 0.0, C.FFMA: 1.6e9,
        C.STALL_PREFIX + "long_scoreboard" + C.STALL_SUFFIX: 41.0, C.STALL_PREFIX + "wait" + C.STALL_SUFFIX: 1.4,
    })  # fmt: skip
    return m


def tiny_row() -> dict[str, float]:
    """One 1024-float row scaled in a 1-block launch: 2 us, nothing busy."""
    m = _base(2.1e-6, 1, 128, 22)
    m.update({
        C.DRAM_READ: 4160.0, C.DRAM_WRITE: 4096.0, C.SM_PCT: 0.4, C.MEMORY_PCT: 1.3, C.DRAM_PCT: 0.5,
        C.L1_PCT: 0.9, C.L2_PCT: 1.3, C.L2_HIT: 40.0, C.ACHIEVED_OCC: 6.2, C.THEORETICAL_OCC: 100.0, C.WAVES: 0.0005,
        C.ISSUE_PCT: 0.3, C.TENSOR_PCT: 0.0, C.GMMA_INSTS: 0.0, C.FMA_PCT: 0.1, C.ALU_PCT: 0.1, C.COALESCING: 100.0,
        C.BANK_LD: 0.0, C.BANK_ST: 0.0, C.FFMA: 0.0,
        C.STALL_PREFIX + "long_scoreboard" + C.STALL_SUFFIX: 12.0,
    })  # fmt: skip
    return m


def latency() -> dict[str, float]:
    """Full occupancy, both units under 40%: barrier stalls dominate (a reduction with too little work per block)."""
    m = copy()
    m.update({C.SM_PCT: 22.0, C.MEMORY_PCT: 31.0, C.DRAM_PCT: 30.0, C.STALL_PREFIX + "barrier" + C.STALL_SUFFIX: 35.0})
    return m


def fma_bound() -> dict[str, float]:
    """An fp32 GEMM without tensor cores: FMA pipe at 80%."""
    m = gemm()
    m.update({C.TENSOR_PCT: 0.0, C.GMMA_INSTS: 0.0, C.FMA_PCT: 80.5, C.SM_PCT: 81.0, C.FFMA: 6.9e10})
    return m


def write_csv(rows: list[tuple[str, tuple[int, ...], tuple[int, ...], dict[str, float]]], units: dict[str, str] | None = None, scale: dict[str, float] | None = None) -> str:
    """NCU `--csv --page raw` text for rows of (kernel, grid, block, metrics). `units`/`scale` print some metrics in
    other units (value / scale), as NCU does without `--print-units base`."""
    units, scale = units or {}, {C.DURATION: 1e-9, **(scale or {})}  # NCU's base unit for durations is ns
    names = sorted({n for _, _, _, m in rows for n in m})
    quote = lambda cells: ",".join(f'"{c}"' for c in cells)
    lines = ["==PROF== Connected to process 4242 (/usr/bin/python3.12)", quote((*INFO_COLUMNS, *names))]
    lines.append(quote(("",) * len(INFO_COLUMNS) + tuple(units.get(n, _base_unit(n)) for n in names)))
    for i, (kernel, grid, block, m) in enumerate(rows):
        info = (i, 4242, "python3.12", "127.0.0.1", kernel, 1, 7, _dims(block), _dims(grid), 0, "9.0")
        values = [_format(m[n] / scale.get(n, 1.0)) if n in m else "n/a" for n in names]
        lines.append(quote((*info, *values)))
    return "\n".join(lines) + "\n"


def _base_unit(name: str) -> str:
    if name.endswith("pct") or ".pct_" in name:
        return "%"
    if name == C.DURATION:
        return "ns"
    if name.startswith("dram__bytes"):
        return "byte"
    if "shared_mem_per_block" in name:
        return "byte/block"
    if name.endswith("per_second"):
        return "hz"
    return ""


def _dims(dims: tuple[int, ...]) -> str:
    padded = tuple(dims) + (1,) * (3 - len(dims))
    return "(" + ", ".join(map(str, padded)) + ")"


def _format(value: float) -> str:
    if abs(value) >= 1000 and abs(value - round(value)) < 1e-9 * abs(value):  # 1.62e-3 s / 1e-9 is not exact
        return f"{round(value):,}"  # NCU prints thousands separators
    return f"{value:.6g}"


SYNTHETIC_FILES = {
    "synthetic_copy.csv": lambda: _rows("copy_kernel", (65536,), (256,), copy()),
    "synthetic_gemm.csv": lambda: _rows("gemm_kernel", (2048,), (256,), gemm()),
    "synthetic_chase.csv": lambda: _rows("chase_kernel", (6336,), (32,), chase()),
    "synthetic_tiny.csv": lambda: _rows("scale_row_kernel", (1,), (128,), tiny_row(), 64),
}


def _rows(kernel: str, grid: tuple[int, ...], block: tuple[int, ...], metrics: dict[str, float], launches: int = 1) -> list:
    return [(kernel, grid, block, metrics)] * launches


def write_synthetic_fixtures(folder) -> None:
    """Rewrite tests/fixtures/ncu/synthetic_*.csv (the tiny one in NCU's scaled units, to exercise the units row)."""
    from pathlib import Path

    for name, rows in SYNTHETIC_FILES.items():
        if "tiny" in name:
            text = write_csv(rows(), units={C.DURATION: "us", C.DRAM_READ: "Kbyte"}, scale={C.DURATION: 1e-6, C.DRAM_READ: 1e3})
        else:
            text = write_csv(rows())
        (Path(folder) / name).write_text(text)


if __name__ == "__main__":  # python -m tests.profiler.archetypes
    from pathlib import Path

    write_synthetic_fixtures(Path(__file__).resolve().parents[1] / "fixtures" / "ncu")
