"""The expert's seed in a model's multi-seed search: a scripted model (a real ModelBackend on scripted replies)
answers its seeds, the expert the last one, and each kernel goes back to whoever can read it."""

from __future__ import annotations

from pipeline.agents.backend import Measurements, ModelBackend
from pipeline.agents.replies import KernelReply
from pipeline.expert.combined import WithExpertSeeds
from pipeline.expert.record import read
from pipeline.llm.scripted import scripted_client
from tests.expert.problems import ROOT, tiny

MODEL_KERNEL = (ROOT / "examples" / "candidates" / "softmax_triton.py").read_text()


def test_the_last_seed_is_the_experts_and_kernels_go_back_to_their_author():
    client, provider = scripted_client([f"```python\n{MODEL_KERNEL}```\n", f"```python\n{MODEL_KERNEL}```\n"])
    backend = WithExpertSeeds(ModelBackend(client, "scripted"))
    problem = tiny("23_Softmax").read_text()
    first = backend.seed(problem, "p", 1, 2)
    last = backend.seed(problem, "p", 2, 2)
    assert isinstance(first, KernelReply) and read(first.kernel) is None  # the model's
    assert isinstance(last, KernelReply) and read(last.kernel).options.paradigm == "fused_triton"
    assert len(provider.requests) == 1  # the expert's seed cost no model call
    transformed = backend.transform(problem, last.kernel, "p")
    assert "no expert transformation applies" in transformed.reason  # answered by the expert, not the model
    backend.transform(problem, first.kernel, "p")
    assert len(provider.requests) == 2  # the model's kernel went to the model
    plan = backend.diagnose(last.kernel, Measurements(None), "memory", "objective")
    assert len(provider.requests) == 3 and plan is not None  # plans: the model first (here it had none), then the rules
    assert backend.name == "scripted + expert seeds"
