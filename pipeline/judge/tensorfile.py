"""Outputs from a worker to the judge: one `outputs` message per kept call, on the job's channel.

On a GPU the worker copies a call's outputs into GPU memory it exports as a file descriptor and sends with the
message (pipeline.judge.devicemem): nothing crosses to the host. Without a GPU, or once the driver refuses, each
tensor goes to a file in the job folder whose name the judge derives from the call's name and the tensor's
position (`file_name`): the message never names a path. The judge opens such a file itself, refusing anything
but a regular file of exactly the size the message's shape and dtype imply (no link is followed, nothing can
block), and reads it into its own memory, so nothing the job does afterwards changes what was read.

Imported by the worker: torch and the standard library only (and egg's devicemem and channel).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import torch

from pipeline.judge import devicemem
from pipeline.judge.channel import CALL_NAME

MAX_TENSORS_PER_CALL = 64


def file_name(call: str, index: int) -> str:
    """The one name the judge reads output `index` of `call` from (call names are checked by `CALL_NAME`)."""
    return f"out-{call}-{index}.bin"


def describe(t: torch.Tensor) -> dict[str, Any]:
    return {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape)}


class OutputSink:
    """The worker's end: `keep(call, tensors)` snapshots them now and tells the judge."""

    def __init__(self, folder: str | os.PathLike[str], connection, device: torch.device) -> None:
        self.folder = Path(folder)
        self.connection = connection
        self.on_gpu = device.type == "cuda" and connection is not None
        self.fallback = ""  # why GPU outputs went to files, once the driver refused

    def keep(self, call: str, tensors: list[torch.Tensor]) -> None:
        if not CALL_NAME.match(call):
            raise ValueError(f"not a call name: {call!r}")
        if self.on_gpu and not self.fallback and tensors and all(t.is_cuda for t in tensors):
            try:
                fd, size, offsets = _export(tensors)
            except devicemem.DeviceMemoryError as exc:
                self.fallback = f"device memory export failed: {exc}"
            else:
                entries = [dict(describe(t), offset=off) for t, off in zip(tensors, offsets)]
                try:
                    self._send({"type": "outputs", "call": call, "tensors": entries, "size": size}, [fd])
                finally:
                    os.close(fd)
                return
        for i, t in enumerate(tensors):
            self._write(self.folder / file_name(call, i), t)
        self._send({"type": "outputs", "call": call, "tensors": [describe(t) for t in tensors]}, [])

    def _send(self, message: dict, fds: list[int]) -> None:
        if self.connection is not None:
            self.connection.send(message, fds)

    @staticmethod
    def _write(path: Path, tensor: torch.Tensor) -> None:
        flat = tensor.detach().reshape(-1)
        nbytes = flat.numel() * flat.element_size()
        if path.exists():
            path.unlink()
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            _allocate(fd, nbytes)
        finally:
            os.close(fd)
        if nbytes:
            target = torch.from_file(str(path), shared=True, size=flat.numel(), dtype=flat.dtype)
            target.copy_(flat)

    @property
    def transport(self) -> str:
        if self.on_gpu:
            return f"files ({self.fallback})" if self.fallback else "device"
        return "files"


def _export(tensors: list[torch.Tensor]) -> tuple[int, int, list[int]]:
    """devicemem.export, tried again once torch's cache has gone back to the driver: the export's memory is drawn
    outside that cache, and a full cache made GiB outputs fall back to files (slow, and memory on the host)."""
    try:
        return devicemem.export(tensors)
    except devicemem.DeviceMemoryError:
        torch.cuda.empty_cache()
        return devicemem.export(tensors)


def _allocate(fd: int, nbytes: int) -> None:
    """Blocks allocated up front: copying into a mapping of unallocated tmpfs pages faults each page in (measured
    on a 2-core VM: 0.9-3.9 s per GiB, against 0.56 s once allocated)."""
    if nbytes == 0:
        return
    try:
        os.posix_fallocate(fd, 0, nbytes)
    except OSError:  # a file system without fallocate: a sparse file, filled as it is written
        os.ftruncate(fd, nbytes)


# The judge's end --------------------------------------------------------------------------------------------------


class OutputError(ValueError):
    """An outputs message or file that does not hold what it says (the job's fault, never the judge's)."""


def tensor_specs(message: dict) -> list[tuple[torch.dtype, tuple[int, ...], int | None]]:
    """(dtype, shape, offset) of each tensor an outputs message describes; OutputError for anything malformed."""
    entries = message.get("tensors")
    if not isinstance(entries, list) or len(entries) > MAX_TENSORS_PER_CALL:
        raise OutputError("the outputs message lists no tensors, or too many")
    specs = []
    for entry in entries:
        if not isinstance(entry, dict):
            raise OutputError("a tensor entry that is not an object")
        offset = entry.get("offset")
        if offset is not None and (not _is_int(offset) or offset < 0):
            raise OutputError(f"not an offset: {offset!r}")
        specs.append((_dtype(entry.get("dtype")), _shape(entry.get("shape")), offset))
    return specs


def nbytes(dtype: torch.dtype, shape: tuple[int, ...]) -> int:
    numel = 1
    for n in shape:
        numel *= n
    return numel * torch.empty((), dtype=dtype).element_size()


def read_file(folder: str | os.PathLike[str], call: str, index: int, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    """Output `index` of `call` from the job folder, read into this process's memory. Only a regular file of
    exactly the expected size is accepted: no link is followed and nothing can block (OutputError otherwise)."""
    size = nbytes(dtype, shape)
    out = torch.empty(shape, dtype=dtype)
    if size == 0:
        return out
    path = os.path.join(os.fspath(folder), file_name(call, index))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise OutputError(f"output {index} of call {call} is missing or not a plain file ({exc.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size != size:
            raise OutputError(f"output {index} of call {call} is not a plain file of {size} bytes")
        view = memoryview(out.reshape(-1).view(torch.uint8).numpy())
        done = 0
        while done < size:
            got = os.preadv(fd, [view[done:]], done)
            if got <= 0:
                raise OutputError(f"output {index} of call {call} ended after {done} of {size} bytes")
            done += got
    finally:
        os.close(fd)
    return out


def read_region(region: torch.Tensor, dtype: torch.dtype, shape: tuple[int, ...], offset: int) -> torch.Tensor:
    """One tensor of an exported region (devicemem.view), with OutputError for one that does not fit."""
    try:
        return devicemem.view(region, devicemem.TensorSpec(dtype, shape, offset))
    except devicemem.DeviceMemoryError as exc:
        raise OutputError(str(exc)) from None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _dtype(name: object) -> torch.dtype:
    """A message's dtype name as a torch dtype (the message comes from a process that ran candidate code)."""
    dtype = getattr(torch, name, None) if isinstance(name, str) and name.isidentifier() else None
    if not isinstance(dtype, torch.dtype):
        raise OutputError(f"not a dtype: {name!r}")
    return dtype


def _shape(shape: object) -> tuple[int, ...]:
    if not isinstance(shape, list) or len(shape) > 16 or not all(_is_int(n) and 0 <= n < 1 << 40 for n in shape):
        raise OutputError(f"not a shape: {shape!r}")
    return tuple(shape)
