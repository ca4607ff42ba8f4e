"""Outputs travel from a worker to the judge as mapped raw files."""

from __future__ import annotations

import shutil

import pytest
import torch

from pipeline.judge.tensorfile import OutputFiles, load_outputs


def test_every_dtype_and_shape_comes_back_exactly(tmp_path):
    tensors = {
        "trial_1": [torch.randn(3, 5), torch.arange(12, dtype=torch.int64).reshape(3, 4)],
        "trial_2": [torch.randn(4, 6).to(torch.bfloat16), torch.rand(7) > 0.5, torch.randn(2, 3, dtype=torch.float16)],
        "scalar": [torch.tensor(2.5, dtype=torch.float64)],
        "empty": [torch.empty(0, 4)],
        "strided": [torch.randn(6, 8).t()],  # not contiguous
    }
    files = OutputFiles(tmp_path)
    for name, values in tensors.items():
        files.keep(name, values)
    files.finish()
    back = load_outputs(tmp_path)
    assert back.keys() == tensors.keys()
    for name, values in tensors.items():
        assert len(back[name]) == len(values)
        for got, want in zip(back[name], values):
            assert got.dtype == want.dtype and got.shape == want.shape
            assert torch.equal(got, want)


def test_a_snapshot_is_taken_when_kept_and_a_later_keep_replaces_it(tmp_path):
    out = torch.zeros(5)
    files = OutputFiles(tmp_path)
    files.keep("timed_0", [out])
    out.fill_(7.0)  # the candidate writes its buffer again after the call: the kept values must not move
    files.keep("timed_1", [out])
    files.keep("timed_1", [out * 2])
    files.finish()
    back = load_outputs(tmp_path)
    assert torch.equal(back["timed_0"][0], torch.zeros(5))
    assert torch.equal(back["timed_1"][0], torch.full((5,), 14.0))


def test_outputs_stay_readable_after_the_job_folder_is_removed(tmp_path):
    folder = tmp_path / "job"
    folder.mkdir()
    files = OutputFiles(folder)
    files.keep("trial_1", [torch.arange(1000, dtype=torch.float32)])
    files.finish()
    back = load_outputs(folder)
    shutil.rmtree(folder)  # the judge deletes the job folder before candidates run: the mapping must hold
    assert float(back["trial_1"][0].sum()) == sum(range(1000))


def test_no_manifest_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_outputs(tmp_path)
