"""Parsing NCU's raw CSV: the units row, thousands separators, tool messages, merging launches."""

from __future__ import annotations

import pytest

from egg.profiler import counters as C
from egg.profiler.counters import profiles_from_rows
from egg.profiler.ncu import (
    collect_command,
    import_command,
    metric_names,
    parse_number,
    parse_raw_csv,
    unit_scale,
)
from tests.profiler import archetypes as A


@pytest.mark.parametrize(
    ("unit", "scale"),
    [("", 1.0), ("%", 1.0), ("byte", 1.0), ("Kbyte", 1e3), ("Gbyte", 1e9), ("nsecond", 1e-9), ("usecond", 1e-6),
     ("msecond", 1e-3), ("second", 1.0), ("Gbyte/second", 1e9), ("Tbyte/second", 1e12), ("cycle/nsecond", 1e9),
     ("cycle/usecond", 1e6), ("Ghz", 1e9), ("inst", 1.0), ("register/thread", 1.0), ("Mbyte/block", 1e6)],
)  # fmt: skip
def test_unit_scale_turns_ncu_units_into_base_units(unit, scale):
    assert unit_scale(unit) == pytest.approx(scale)


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
    assert "--export" in command and "egg.profiler.driver" in joined
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
    assert k.registers_per_thread == 204 and k.shared_bytes_per_block == 147456 + 1024
    assert k.occupancy_limiter in ("registers", "shared_memory")
    assert k.tensor_pipe_pct == pytest.approx(84.9)
    assert list(k.stalls) == ["gmma", "long_scoreboard"]
    assert k.achieved_bw_bytes_per_s == pytest.approx((6.1e8 + 1.3e8) / 1.62e-3)
    assert len(k.metrics) >= 30


def test_the_ncu_rep_reader_agrees_with_the_csv():
    """Needs NVIDIA's reader (`pip install ncu-report==2025.3.1`) and the captured report (bench/profile_h200.py)."""
    from pathlib import Path

    from egg.profiler.ncu import read_ncu_rep

    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "ncu"
    report, table = fixtures / "h200_copy.ncu-rep", fixtures / "h200_copy.csv"
    if not report.exists():
        pytest.skip("h200_copy.ncu-rep not captured yet (bench/profile_h200.py)")
    pytest.importorskip("ncu_report")
    (from_rep,) = profiles_from_rows(read_ncu_rep(report))
    (from_csv,) = profiles_from_rows(parse_raw_csv(table.read_text()))
    assert from_rep.name == from_csv.name
    assert from_rep.duration_ms == pytest.approx(from_csv.duration_ms, rel=1e-3)
    assert from_rep.dram_bytes == pytest.approx(from_csv.dram_bytes, rel=1e-3)
