"""Inputs the judge was not shown: a drop-in ModelNew is right on every input the reference accepts, or refuses it
with one clear error. Never a wrong answer on the user's batch size.

After a candidate passes on the problem's own inputs, the judge derives other inputs from them: the leading size
of the first tensor input halved, then made odd (one less than itself, or two when it is odd), applied to every
tensor input that shares that leading size (a batch), else to the first input alone. Each derivation is a problem
of its own: the problem's file with its `get_inputs` wrapped (the same draws, cut), judged like any problem (the
reference runs first, in its own sandboxed worker; correctness only, no timing). A derivation the reference itself
does not run on is not one the candidate owes anything (a GEMM whose K is the leading size of B).

What the candidate does there decides:
- right on every derived input: `general`;
- a clean refusal (a Python exception raised by its code, such as the expert backend's shape guard): `specialised
  to the problem's shapes`, with the error it raised: allowed;
- a wrong answer, a crash, a hang: a failed check (status mismatch, or the derived run's own status), with what
  the derived inputs were.

Imports: the standard library and the judge (the problem file is untrusted: only the workers import it).
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from pipeline.types import Check, EvalOptions, EvalResult, Problem, Status

GENERAL = "general"
SPECIALISED = "specialised to the problem's shapes"
UNCHECKED = "not checked"  # no derived input the reference runs on (or one it hangs on): said, never read as a pass
# a refusal is a Python exception the candidate's own code raised (not a crash, a timeout or a wrong answer)
_REFUSAL = re.compile(r"call trial_1 raised (ValueError|TypeError|AssertionError|NotImplementedError|RuntimeError|IndexError|KeyError): ")
_CRASH = re.compile(r"illegal memory access|out of memory|can't allocate memory|memory limit|segmentation|SIGSEGV|SIGBUS|"
                    r"core dumped|died from|CUDA error", re.I)


@dataclass(frozen=True)
class Derivation:
    name: str  # "halved", "odd" or "doubled_plus_one"
    shared: bool  # every tensor input with the anchor's leading size (True), or the anchor alone
    anchor: int = 0  # which tensor input's leading size is varied (the k-th tensor input with a leading dimension)

    def label(self) -> str:
        which = "" if self.anchor == 0 else f" of tensor input {self.anchor + 1}"
        return f"leading size{which} {self.name.replace('_', ' ')}" + ("" if self.shared else ", that input only")


SIZES = ("halved", "odd", "doubled_plus_one")  # below, odd below, above and odd: tails, remainders, growth
MAX_ANCHORS = 3  # tensor inputs tried as the batch's carrier, in order, when the first's size cannot vary


def derivations(size_name: str, facts: dict) -> list[Derivation]:
    """The ways to vary the inputs by `size_name`, in the order tried: each distinct leading size of the tensor
    inputs (as the reference's run recorded them), for every input of that size, then for that input alone."""
    shapes = facts.get("input_shapes") or [[2]]
    anchors, seen = [], set()
    for k, shape in enumerate(shapes):
        if shape and shape[0] not in seen and len(anchors) < MAX_ANCHORS:
            seen.add(shape[0])
            anchors.append(k)
    return [Derivation(size_name, shared, k) for k in anchors for shared in (True, False)]


# Appended to the problem's source: `get_inputs` returns the same draws at another leading size (cut, or grown by
# a second draw), and an integer input equal to the varied size (a row count beside the tensors) follows it.
_WRAPPER = '''

# --- egg: inputs of another shape (pipeline.judge.shapes) ---
def _egg_derived_inputs(_egg_nominal=get_inputs):
    import torch as _egg_torch
    inputs = list(_egg_nominal())
    tensors = [i for i, x in enumerate(inputs) if isinstance(x, _egg_torch.Tensor) and x.dim() > 0]
    if len(tensors) <= {anchor}:
        raise ValueError("egg: the problem has no tensor input {anchor} with a leading dimension to vary")
    size = inputs[tensors[{anchor}]].shape[0]
    new = {new}
    if new < 1 or new == size:
        raise ValueError(f"egg: a leading size of {{size}} cannot be {name}")
    chosen = [i for i in tensors if inputs[i].shape[0] == size] if {shared} else [tensors[{anchor}]]
    extra = [list(_egg_nominal()) for _ in range(-(-(new - size) // size))] if new > size else []

    def derived(i, x):
        if i in chosen:
            return _egg_torch.cat([x, *(more[i] for more in extra)])[:new] if extra else x[:new].clone()
        if {shared} and type(x) is int and x == size:
            return new
        return x

    return [derived(i, x) for i, x in enumerate(inputs)]


get_inputs = _egg_derived_inputs
'''
_SIZES = {"halved": "size // 2", "odd": "size - 1 if size % 2 == 0 else size - 2", "doubled_plus_one": "2 * size + 1"}


def derived_source(problem_source: str, derivation: Derivation) -> str:
    """The problem's source with `get_inputs` wrapped to give the derived inputs."""
    return problem_source.rstrip("\n") + "\n" + _WRAPPER.format(new=_SIZES[derivation.name], name=derivation.name,
                                                               shared=derivation.shared, anchor=derivation.anchor)


def derived_options(options: EvalOptions) -> EvalOptions:
    """Correctness on the derived inputs only: two trials and the signed one, no timing, no extra calls."""
    return dataclasses.replace(options, correctness_trials=2, scaled_trial=False, outlier_trial=False, repeat_calls=0,
                               timing=False, other_shapes=False)


@dataclass(frozen=True)
class ShapeReport:
    """What the candidate did on inputs of other shapes."""

    generality: str  # GENERAL, SPECIALISED, or "" when no derivation applied (the reference ran on none)
    check: Check
    failed: EvalResult | None = None  # the derived run that failed, when one did

    def apply(self, result: EvalResult) -> EvalResult:
        """The candidate's verdict with this check in it: a failure here fails the verdict."""
        checks = (*result.checks, self.check)
        if self.failed is None:
            return dataclasses.replace(result, checks=checks, generality=self.generality)
        status = _status_of(self.failed)
        return dataclasses.replace(result, status=status, reason=self.check.detail, checks=checks, generality="",
                                   log_tail=self.failed.log_tail or result.log_tail)


def check_other_shapes(judge, problem: Problem, candidate, folder: Path, facts: dict | None = None) -> ShapeReport:
    """Judge `candidate` on derived inputs with `judge` (a Judge whose options are `derived_options`), writing each
    derived problem into `folder` (the judge's own, out of any job's view). `facts`: the problem's reference facts
    (its input shapes say which inputs carry a leading size)."""
    from pipeline.judge.judge import ReferenceError

    source = Path(problem.path).read_text(encoding="utf-8-sig")
    seen: list[str] = []
    refused: list[str] = []
    skipped: list[str] = []
    for size_name in SIZES:
        for derivation in derivations(size_name, facts or {}):
            derived = _write(folder, problem, source, derivation)
            try:
                reference = judge.reference(derived)
            except ReferenceError as exc:
                if "ran past its limit" in str(exc):  # a reference that hangs on other inputs: none is tried further
                    skipped.append(f"the reference ran past its limit on {derivation.label()}")
                    return _report(seen, refused, skipped)
                continue  # the reference does not run on these inputs: the next way of varying them
            result = judge.evaluate(derived, candidate)
            what = f"{derivation.label()} ({_shapes(reference.result)})"
            if result.ok:
                seen.append(what)
            elif result.status is Status.INFRA_ERROR and result.reason.startswith("the problem cannot be judged"):
                skipped.append(f"{derivation.label()}: {_first_line(result.reason)}")
            elif _refused(result):
                refused.append(f"{what}: {_first_line(result.reason)}")
            else:
                detail = f"wrong on inputs of another shape, {what}: {result.status.value}: {_first_line(result.reason)}"
                return ShapeReport("", Check("other_shapes", False, detail), result)
            break
    return _report(seen, refused, skipped)


def _report(seen: list[str], refused: list[str], skipped: list[str]) -> ShapeReport:
    tail = f"; not checked: {'; '.join(skipped)}" if skipped else ""
    if refused:
        detail = f"{SPECIALISED}: it refused " + "; ".join(refused) + (f"; right on {', '.join(seen)}" if seen else "") + tail
        return ShapeReport(SPECIALISED, Check("other_shapes", True, detail))
    if seen:
        return ShapeReport(GENERAL, Check("other_shapes", True, f"{GENERAL}: right on " + ", ".join(seen) + tail))
    why = "; ".join(skipped) if skipped else "the reference runs on no derived inputs (a leading size halved, odd or doubled plus one)"
    return ShapeReport(UNCHECKED, Check("other_shapes", None, f"{UNCHECKED}: {why}"))


def _write(folder: Path, problem: Problem, source: str, derivation: Derivation) -> Problem:
    from pipeline.problems.loader import load_problem

    text = derived_source(source, derivation)
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    path = folder / f"{Path(problem.path).stem}__{derivation.name}{'' if derivation.shared else '_first'}_{digest}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.is_file():
        path.write_text(text, encoding="utf-8")
    return load_problem(path)


def _status_of(failed: EvalResult) -> Status:
    """A derived run's failure as the candidate's: a wrong answer (wrong values, or outputs of another size than
    the reference's, which the channel's integrity check reports) is a mismatch; a crash, a hang, a ban stay so."""
    wrong_size = failed.status is Status.BANNED and failed.reason.startswith("channel_integrity") and "the reference's" in failed.reason
    return Status.MISMATCH if failed.status is Status.MISMATCH or wrong_size else failed.status


def _refused(result: EvalResult) -> bool:
    """A clean refusal: the candidate's first call on the derived inputs raised a plain Python exception of its own,
    before any output (a later call's exception could follow a wrong answer), and not a crash or the memory limit.
    Read from the worker's own reason, never from the log the candidate writes."""
    reason = result.reason
    return (result.status is Status.RUNTIME_ERROR and bool(_REFUSAL.match(reason)) and not _CRASH.search(reason)
            and not any(not t.passed for t in result.trials))


def _shapes(facts: dict) -> str:
    """The derived inputs' tensor shapes, as the reference's run recorded them."""
    shapes = facts.get("input_shapes")
    return ", ".join(str(list(s)) for s in shapes) if shapes else "inputs cut"


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= 300 else line[:297] + "..."
