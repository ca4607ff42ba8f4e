"""The torch profiler fallback: kernel times, grid, block, registers and shared memory from a Kineto trace."""

from __future__ import annotations

import pytest

from pipeline.profiler.trace import profiles_from_trace, short_name


def kernel_event(name: str, ts: float, dur_us: float, grid, block, regs=32, smem=0) -> dict:
    args = {"grid": grid, "block": block, "registers per thread": regs, "shared memory": smem, "est. achieved occupancy %": 100}
    return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur_us, "args": args}


def test_kernel_events_become_profiles_grouped_by_name_grid_and_block():
    trace = {
        "traceEvents": [
            {"ph": "X", "cat": "cpu_op", "name": "aten::empty_like", "ts": 0, "dur": 3},
            kernel_event("softmax_row_kernel", 10, 1100.0, [65536, 1, 1], [128, 1, 1], regs=95, smem=1040),
            kernel_event("void at::native::(anonymous namespace)::fill_kernel<float>(float*, int)", 5, 2.5, [1, 1, 1], [256, 1, 1]),
            kernel_event("void at::native::(anonymous namespace)::fill_kernel<float>(float*, int)", 2000, 3.5, [1, 1, 1], [256, 1, 1]),
        ]
    }
    fill, softmax = profiles_from_trace(trace)
    assert fill.name == "fill_kernel" and fill.calls == 2 and fill.duration_ms == pytest.approx(0.006)
    assert softmax.grid == (65536, 1, 1) and softmax.block == (128, 1, 1)
    assert softmax.registers_per_thread == 95 and softmax.shared_bytes_per_block == 1040
    assert softmax.duration_ms == pytest.approx(1.1)
    assert softmax.memory_throughput_pct is None  # no counters


@pytest.mark.parametrize(
    ("name", "short"),
    [("softmax_row_kernel", "softmax_row_kernel"),
     ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)", "vectorized_elementwise_kernel"),
     ("sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas", "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas")],
)  # fmt: skip
def test_short_names_match_ncu_function_names(name, short):
    assert short_name(name) == short
