"""Outputs travel from a worker to the judge as files whose names the judge derives, read only as plain files of
exactly the size their message implies."""

from __future__ import annotations

import os

import pytest
import torch

from pipeline.judge.tensorfile import OutputError, OutputSink, file_name, read_file, tensor_specs


class Recorder:
    """A channel end of our own that keeps what is sent (the sink's only collaborator)."""

    def __init__(self) -> None:
        self.sent: list[tuple[dict, list[int]]] = []

    def send(self, message: dict, fds=()) -> None:
        self.sent.append((message, list(fds)))


def keep_and_read(tmp_path, tensors: dict[str, list[torch.Tensor]]) -> dict[str, list[torch.Tensor]]:
    channel = Recorder()
    sink = OutputSink(tmp_path, channel, torch.device("cpu"))
    for name, values in tensors.items():
        sink.keep(name, values)
    back = {}
    for message, fds in channel.sent:
        assert message["type"] == "outputs" and fds == [] and "file" not in str(message)  # no path ever travels
        specs = tensor_specs(message)
        back[message["call"]] = [read_file(tmp_path, message["call"], i, d, s) for i, (d, s, _) in enumerate(specs)]
    return back


def test_every_dtype_and_shape_comes_back_exactly(tmp_path):
    tensors = {
        "trial_1": [torch.randn(3, 5), torch.arange(12, dtype=torch.int64).reshape(3, 4)],
        "trial_2": [torch.randn(4, 6).to(torch.bfloat16), torch.rand(7) > 0.5, torch.randn(2, 3, dtype=torch.float16)],
        "scalar": [torch.tensor(2.5, dtype=torch.float64)],
        "empty": [torch.empty(0, 4)],
        "strided": [torch.randn(6, 8).t()],  # not contiguous
    }
    back = keep_and_read(tmp_path, tensors)
    assert back.keys() == tensors.keys()
    for name, values in tensors.items():
        for got, want in zip(back[name], values):
            assert got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want)


def test_what_was_read_does_not_change_when_the_job_rewrites_its_file(tmp_path):
    value = torch.arange(6, dtype=torch.float32)
    got = keep_and_read(tmp_path, {"trial_1": [value]})["trial_1"][0]
    (tmp_path / file_name("trial_1", 0)).write_bytes(b"\0" * 24)
    assert torch.equal(got, value)


@pytest.mark.parametrize("plant", ["symlink", "fifo", "short", "long", "folder", "missing"])
def test_anything_but_a_plain_file_of_the_right_size_is_refused(tmp_path, plant):
    """A job cannot point the judge at another file (the reference's, a secret), block it on a FIFO, or hand it
    a size of its choosing: each is an OutputError, read in no time."""
    path = tmp_path / file_name("trial_1", 0)
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"\1" * 16)
    if plant == "symlink":
        path.symlink_to(secret)
    elif plant == "fifo":
        os.mkfifo(path)
    elif plant == "short":
        path.write_bytes(b"\1" * 15)
    elif plant == "long":
        path.write_bytes(b"\1" * 17)
    elif plant == "folder":
        path.mkdir()
    with pytest.raises(OutputError):
        read_file(tmp_path, "trial_1", 0, torch.float32, (4,))


@pytest.mark.parametrize("tensors", [
    None, "x", [{"dtype": "float32"}], [{"dtype": "os", "shape": [1]}], [{"dtype": "float32", "shape": [-1]}],
    [{"dtype": "float32", "shape": [1 << 41]}], [{"dtype": "float32", "shape": [True]}],
    [{"dtype": "float32", "shape": [1], "offset": -4}], [{"dtype": "float32", "shape": [1]}] * 65,
])
def test_malformed_outputs_messages_are_refused(tensors):
    with pytest.raises(OutputError):
        tensor_specs({"type": "outputs", "call": "trial_1", "tensors": tensors})


def test_call_names_that_could_be_paths_are_refused(tmp_path):
    sink = OutputSink(tmp_path, Recorder(), torch.device("cpu"))
    for name in ("../x", "trial_1/../../etc", "/abs", "A", ""):
        with pytest.raises(ValueError):
            sink.keep(name, [torch.ones(1)])
