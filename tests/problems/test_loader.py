"""The problem loader reads a file, never runs it: a KernelBench problem is a UTF-8 `.py` file (a byte-order mark
is fine, as it is for Python) whose Model is an nn.Module class and whose input makers are functions."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.problems.loader import ProblemError, fingerprint_text, load_candidate, load_problem

ROOT = Path(__file__).resolve().parents[2]
SOFTMAX = ROOT / "data" / "problems" / "tiny" / "level1" / "23_Softmax.py"
KERNEL = ROOT / "examples" / "candidates" / "softmax_triton.py"
INPUTS = "def get_inputs():\n    return []\n\ndef get_init_inputs():\n    return []\n"


def _problem(tmp_path: Path, source: str, name: str = "p.py") -> Path:
    path = tmp_path / name
    path.write_text(source)
    return path


@pytest.mark.parametrize("model, message", [
    ("Model = 1\n", "Model is not a class"),
    ("def Model():\n    pass\n", "Model is not a class"),
    ("class Model:\n    pass\n", "class Model has no base class"),
    ("class Model(object):\n    pass\n", "class Model has no base class"),
])
def test_a_model_that_is_not_an_nn_module_class_is_refused(tmp_path, model, message):
    with pytest.raises(ProblemError, match=message):
        load_problem(_problem(tmp_path, "import torch\n" + model + INPUTS))


def test_input_makers_that_are_not_functions_are_refused_and_aliases_are_not(tmp_path):
    with pytest.raises(ProblemError, match="get_inputs is not a function"):
        load_problem(_problem(tmp_path, "import torch\nclass Model(torch.nn.Module):\n    pass\nget_inputs = 1\ndef get_init_inputs():\n    return []\n"))
    aliased = "import torch\nclass Model(torch.nn.Module):\n    pass\nget_inputs = lambda: []\ndef _init():\n    return []\nget_init_inputs = _init\n"
    assert load_problem(_problem(tmp_path, aliased, "q.py")).name == "q"


def test_a_problem_or_a_candidate_that_is_not_a_py_file_is_refused(tmp_path):
    text = _problem(tmp_path, SOFTMAX.read_text(), "problem.txt")
    with pytest.raises(ProblemError, match=r"problem.txt: a problem is a Python file \(.py\)"):
        load_problem(text)
    with pytest.raises(ProblemError, match=r"kernel.txt: a candidate is a Python file \(.py\)"):
        load_candidate(_problem(tmp_path, KERNEL.read_text(), "kernel.txt"))


def test_a_utf8_file_with_a_byte_order_mark_is_accepted_as_python_accepts_it(tmp_path):
    problem, kernel = tmp_path / "bom_problem.py", tmp_path / "bom_kernel.py"
    problem.write_bytes(b"\xef\xbb\xbf" + SOFTMAX.read_bytes())
    kernel.write_bytes(b"\xef\xbb\xbf" + KERNEL.read_bytes())
    assert load_problem(problem).fingerprint == fingerprint_text(SOFTMAX.read_text())
    assert load_candidate(kernel).fingerprint == fingerprint_text(KERNEL.read_text())


def test_a_file_that_is_not_utf8_is_one_line_naming_the_byte(tmp_path):
    latin = tmp_path / "latin.py"
    latin.write_bytes(SOFTMAX.read_bytes().replace(b"import torch", b"# caf\xe9\nimport torch", 1))
    with pytest.raises(ProblemError) as refused:
        load_problem(latin)
    offset = latin.read_bytes().index(bytes([0xE9]))
    assert str(refused.value) == f"{latin}: not UTF-8 text (byte 0xe9 at offset {offset}): save it as UTF-8"
