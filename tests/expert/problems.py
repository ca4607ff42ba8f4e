"""Problems the expert tests run on: the tiny suite and the expert's own fixtures, built as the judge builds them."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TINY = sorted((ROOT / "data" / "problems" / "tiny").glob("level*/*.py"))
DEGENERATE = sorted((ROOT / "data" / "problems" / "tiny" / "degenerate").glob("*.py"))
FIXTURES = ROOT / "tests" / "fixtures" / "expert"
ZOO = sorted(FIXTURES.glob("*.py"))


def tiny(name: str) -> Path:
    return next(p for p in TINY if p.stem == name)


def fixture(name: str) -> Path:
    return FIXTURES / f"{name}.py"


def label(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


def load(path: Path) -> Any:
    """The problem module (these are repository files, trusted: the tests may import them)."""
    spec = importlib.util.spec_from_file_location(f"expert_problem_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def build(path: Path, signed: bool = False) -> tuple[Any, list[Any], dict[str, Any]]:
    """(model, inputs, named parameters and buffers) under KernelBench's seeding; `signed` redraws float inputs
    from randn, as the judge's signed trial does."""
    import torch

    module = load(path)
    torch.manual_seed(42)
    init = module.get_init_inputs()
    torch.manual_seed(42)
    model = module.Model(*init)
    torch.manual_seed(7)
    inputs = list(module.get_inputs())
    if signed:
        inputs = [torch.randn_like(t) if torch.is_tensor(t) and t.is_floating_point() else t for t in inputs]
    params = {name: t.detach().clone() for name, t in [*model.named_parameters(), *model.named_buffers()]}
    return model, inputs, params
