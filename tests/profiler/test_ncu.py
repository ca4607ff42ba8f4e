"""Parsing NCU's raw CSV: the units row, thousands separators, tool messages, merging launches."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.profiler import counters as C
from pipeline.profiler.counters import profiles_from_rows
from pipeline.profiler.ncu import (
    collect_command,
    import_command,
    metric_names,
    parse_number,
    parse_raw_csv,
    unit_scale,
)
from tests.profiler import archetypes as A

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ncu"


@pytest.mark.parametrize(
    ("unit", "scale"),
    [("", 1.0), ("%", 1.0), ("byte", 1.0), ("Kbyte", 1e3), ("Gbyte", 1e9), ("nsecond", 1e-9), ("usecond", 1e-6),
     ("msecond", 1e-3), ("second", 1.0), ("Gbyte/second", 1e9), ("Tbyte/second", 1e12), ("cycle/nsecond", 1e9),
     ("cycle/usecond", 1e6), ("Ghz", 1e9), ("inst", 1.0), ("register/thread", 1.0), ("Mbyte/block", 1e6),
     ("ns", 1e-9), ("us", 1e-6), ("ms", 1e-3), ("s", 1.0), ("Tbyte/s", 1e12), ("hz", 1.0), ("byte/block", 1.0),
     ("inst/cycle", 1.0), ("SM", 1.0), ("cluster", 1.0), ("pass", 1.0)],
)  # fmt: skip
def test_unit_scale_turns_ncu_units_into_base_units(unit, scale):
    assert unit_scale(unit) == pytest.approx(scale)


def test_a_metric_in_an_unknown_unit_is_left_out_not_misread():
    assert unit_scale("furlong") is None and unit_scale("byte/fortnight") is None
    text = A.write_csv([("copy_kernel", (65536,), (256,), A.copy())], units={C.DURATION: "furlong"})
    (row,) = parse_raw_csv(text)
    assert C.DURATION not in row.metrics and row.metrics[C.DRAM_READ] == pytest.approx(1.074e9)


def test_real_ncu_csv_thousands_separators_and_ns_durations_come_back_in_base_units():
    """Nsight Compute 2025.3 on the H200 writes "520,352" in "ns" and "1,073,777,664" in "byte"; read as seconds,
    the duration came out a million times too long (a 0.52 ms copy reported as 520,352,000 ms)."""
    (row,) = parse_raw_csv((FIXTURES / "h200_copy.csv").read_text())
    m = row.metrics
    assert row.name == "copy_kernel" and row.grid == (65536, 1, 1) and row.block == (256, 1, 1)
    assert m[C.DURATION] == pytest.approx(520_352e-9)
    assert m[C.DRAM_READ] == 1_073_777_664 and m[C.DRAM_WRITE] == 1_049_539_328
    assert m["gpc__cycles_elapsed.avg.per_second"] == pytest.approx(1.952e9, rel=1e-3)  # "hz", "1,952,197,743.07"
    assert m[C.MEMORY_PCT] == pytest.approx(84.81) and m[C.REGISTERS] == 32 and m[C.GRID_SIZE] == 65_536
    assert "launch__cluster_scheduling_policy" not in m  # a string ("PolicySpread"), not a number
    (k,) = profiles_from_rows([row])
    assert k.duration_ms == pytest.approx(0.520352)
    assert k.dram_bytes == pytest.approx(2.123e9, rel=1e-3)
    assert k.achieved_bw_bytes_per_s == pytest.approx(4.08e12, rel=1e-2)


def test_numbers_with_thousands_separators_and_na():
    assert parse_number("1,073,741,824") == 1073741824
    assert parse_number("12.5") == 12.5
    assert parse_number("n/a") is None
    assert parse_number("") is None


def test_the_package_ships_the_41_metric_names():
    names = metric_names()
    assert len(names) == 41
    assert "gpu__time_duration.sum" in names and all("__" in n for n in names)


def test_collect_command_never_changes_clocks_and_keeps_only_the_measured_range(tmp_path):
    command = collect_command("ncu", tmp_path / "r.ncu-rep", tmp_path / "spec.json")
    joined = " ".join(command)
    assert command[command.index("--clock-control") + 1] == "none"
    assert command[command.index("--profile-from-start") + 1] == "off"  # the driver starts and stops profiling
    assert command[command.index("--metrics") + 1].count(",") == 40
    assert "--export" in command and "pipeline.profiler.driver" in joined
    assert import_command("ncu", tmp_path / "r.ncu-rep")[-6:] == ["--page", "raw", "--print-units", "base", "--print-kernel-base", "function"]


def test_raw_csv_rows_come_back_in_base_units():
    text = A.write_csv(
        [("copy_kernel", (65536,), (256,), A.copy())],
        units={C.DURATION: "usecond", C.DRAM_READ: "Mbyte"},
        scale={C.DURATION: 1e-6, C.DRAM_READ: 1e6},
    )
    (row,) = parse_raw_csv(text)
    assert row.name == "copy_kernel" and row.grid == (65536, 1, 1) and row.block == (256, 1, 1)
    assert row.metrics[C.DURATION] == pytest.approx(520e-6)
    assert row.metrics[C.DRAM_READ] == pytest.approx(1.074e9, rel=1e-5)
    assert row.metrics[C.REGISTERS] == 32
    assert not any(name in row.metrics for name in A.INFO_COLUMNS)


def test_text_without_a_table_gives_no_rows():
    assert parse_raw_csv("==PROF== Disconnected\n==WARNING== No kernels were profiled.\n") == []


def test_launches_of_one_kernel_are_merged_times_add_percentages_average():
    fast, slow = A.tiny_row(), A.tiny_row()
    slow[C.DURATION], slow[C.SM_PCT] = 6.3e-6, 1.2
    rows = parse_raw_csv(A.write_csv([("k", (1,), (128,), fast), ("k", (1,), (128,), slow), ("other", (4,), (128,), fast)]))
    merged, other = profiles_from_rows(rows)
    assert merged.calls == 2 and other.calls == 1
    assert merged.duration_ms == pytest.approx((2.1e-6 + 6.3e-6) * 1e3)
    assert merged.sm_throughput_pct == pytest.approx((0.4 * 2.1 + 1.2 * 6.3) / 8.4)
    assert merged.dram_bytes == pytest.approx(2 * (4160 + 4096))


def test_a_profile_reads_every_counter_it_names():
    (k,) = profiles_from_rows(parse_raw_csv(A.write_csv([("gemm_kernel", (2048,), (256,), A.gemm())])))
    assert k.registers_per_thread == 204 and k.shared_bytes_per_block == 147456  # dynamic + static, as NCU counts
    assert k.occupancy_limiter in ("registers", "shared_memory")
    assert k.tensor_pipe_pct == pytest.approx(84.9)
    assert list(k.stalls) == ["gmma", "long_scoreboard"]
    assert k.achieved_bw_bytes_per_s == pytest.approx((6.1e8 + 1.3e8) / 1.62e-3)
    assert len(k.metrics) >= 30


def test_the_ncu_rep_reader_agrees_with_the_csv():
    """Needs NVIDIA's reader, which runs on CPU too (`pip install ncu-report==2025.3.1`, not a dependency of egg)."""
    from pipeline.profiler.ncu import read_ncu_rep

    pytest.importorskip("ncu_report", reason="NVIDIA's ncu_report module is not installed (pip install ncu-report==2025.3.1)")
    (from_rep,) = profiles_from_rows(read_ncu_rep(FIXTURES / "h200_copy.ncu-rep"))
    (from_csv,) = profiles_from_rows(parse_raw_csv((FIXTURES / "h200_copy.csv").read_text()))
    assert from_rep.name == from_csv.name == "copy_kernel"
    assert from_rep.duration_ms == pytest.approx(from_csv.duration_ms, rel=1e-3) and from_csv.duration_ms == pytest.approx(0.520352)
    assert from_rep.dram_bytes == pytest.approx(from_csv.dram_bytes, rel=1e-3)
    assert from_rep.shared_bytes_per_block == from_csv.shared_bytes_per_block == 0
