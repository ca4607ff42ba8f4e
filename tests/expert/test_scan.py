"""Scans (pipeline.expert.scan): cumsum and cumprod lowered to a Triton kernel of their own, flip-scan-flip as one
backwards scan, and what stays in torch. The judge's verdicts on the scan zoo are in test_lowering's table."""

from __future__ import annotations

from pipeline.expert.lowering import Lowering
from pipeline.expert.options import Options
from pipeline.expert.record import read

PROBLEM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return {body}


def get_inputs():
    return [{inputs}]


def get_init_inputs():
    return []
'''


def lowered(body: str, inputs: str = "torch.rand(4, 300)", options: Options = Options()):
    lowering = Lowering.of(PROBLEM.format(body=body, inputs=inputs))
    return lowering, lowering.lower(options)


def test_a_reverse_cumsum_written_as_flip_cumsum_flip_is_one_backwards_scan_with_no_copy():
    lowering, seed = lowered("torch.cumsum(x.flip(1), dim=1).flip(1)")
    live = lowering.graph.live()
    scans = [n for n in lowering.graph.nodes if n.id in live and n.op == "scan"]
    assert [(n.fn, n.attr("axis"), n.attr("reverse")) for n in scans] == [("sum", 1, True)]
    assert not [n for n in lowering.graph.nodes if n.id in live and n.op == "library"]
    assert read(seed.source).rules == ("blocked_scan",) and ".flip(" not in seed.source.split("class ModelNew")[1]
    assert "p = RNUMEL - 1 - rindex" in seed.source


def test_a_flip_on_its_own_or_along_another_axis_stays_a_torch_call():
    lowering, _ = lowered("torch.cumsum(x.flip(0), dim=1).flip(0)")
    live = lowering.graph.live()
    assert [n.fn for n in lowering.graph.nodes if n.id in live and n.op == "library"] == ["Tensor.flip", "Tensor.flip"]
    assert [n.attr("reverse") for n in lowering.graph.nodes if n.id in live and n.op == "scan"] == [False]


def test_a_cumsum_of_integers_stays_in_torch():
    lowering = Lowering.of(PROBLEM.format(body="torch.cumsum(x, dim=1)", inputs="torch.randint(0, 5, (4, 300))"))
    assert not [n for n in lowering.graph.nodes if n.op == "scan"]


def test_along_the_contiguous_axis_a_row_per_program_across_it_64_rows_wide():
    _, along = lowered("torch.cumsum(x, dim=1)", options=Options(row_block=64))
    assert "XBLOCK=4, RBLOCK=64" in along.source  # the 4 rows of 300 in one program: 1024 elements a chunk at most
    assert "INNER=1," in along.source and "for r0 in range(0, RNUMEL, RBLOCK)" in along.source
    _, across = lowered("torch.cumprod(x, dim=0)", inputs="torch.rand(300, 100)")
    assert "INNER=100," in across.source and "XBLOCK=64" in across.source and "tl.cumprod(" in across.source
