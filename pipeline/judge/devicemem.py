"""GPU memory handed from a worker to the judge without leaving the GPU.

A worker copies the outputs it keeps into a fresh allocation of CUDA's virtual memory management API (cuMemCreate),
exports it as a file descriptor (POSIX handle), sends that over the job's channel and unmaps its own view: from then
on only the judge can read or write those bytes, and they outlive the worker. The judge maps the descriptor and
reads the outputs as CUDA tensors in place. Against copying them to host files (the path on the CPU, and the fallback)
this saves a device-to-host and a host-to-device pass over every output, which on GiB outputs was most of a
verdict's time. Descriptors cross PID namespaces, so this works between the judge and an isolated worker
(measured on the H200: legacy CUDA IPC handles carry a PID, these do not).

Imports: torch, ctypes and the standard library only (the GPU worker uses this module).
"""

from __future__ import annotations

import ctypes
import os
import sys
from dataclasses import dataclass

import torch

ALIGN = 256  # bytes between tensors in one region (every dtype's alignment)
_CU_MEM_ALLOCATION_TYPE_PINNED = 1
_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1
_CU_MEM_LOCATION_TYPE_DEVICE = 1
_CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
_CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0

_u64, _size = ctypes.c_ulonglong, ctypes.c_size_t


class DeviceMemoryError(RuntimeError):
    """The driver refused (no VMM support, out of memory, a bad descriptor)."""


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _AllocationProp(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", _Location),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", _AllocFlags)]


class _AccessDesc(ctypes.Structure):
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


_driver: ctypes.CDLL | None = None


def _cuda() -> ctypes.CDLL:
    global _driver
    if _driver is None:
        try:
            _driver = ctypes.CDLL("libcuda.so.1")
        except OSError as exc:
            raise DeviceMemoryError(f"libcuda not loadable: {exc}") from exc
    return _driver


def _call(name: str, *args) -> None:
    result = getattr(_cuda(), name)(*args)
    if result != 0:
        raise DeviceMemoryError(f"{name} failed with CUDA error {result}")


def _device() -> int:
    torch.cuda.synchronize()  # also makes torch's primary context current on this thread
    return torch.cuda.current_device()


def _prop(device: int) -> _AllocationProp:
    return _AllocationProp(_CU_MEM_ALLOCATION_TYPE_PINNED, _CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                           _Location(_CU_MEM_LOCATION_TYPE_DEVICE, device), None, _AllocFlags())


def _granularity(device: int) -> int:
    value = _size()
    _call("cuMemGetAllocationGranularity", ctypes.byref(value), ctypes.byref(_prop(device)), _CU_MEM_ALLOC_GRANULARITY_MINIMUM)
    return value.value


class _ArrayInterface:
    """Lets torch.as_tensor wrap a raw device address; the tensor keeps this object (and so the mapping) alive."""

    def __init__(self, mapping: _Mapping) -> None:
        self.mapping = mapping
        self.__cuda_array_interface__ = {"shape": (mapping.size,), "typestr": "|u1", "data": (mapping.address, False), "version": 3}


class _Mapping:
    """An allocation handle mapped at a reserved address range; unmapped and released by `close` (or when the
    last tensor on it is freed)."""

    def __init__(self, handle: int, size: int, device: int) -> None:
        self.handle, self.size, self.device = handle, size, device
        address = _u64()
        _call("cuMemAddressReserve", ctypes.byref(address), _size(size), _size(0), _u64(0), _u64(0))
        self.address = address.value
        try:
            _call("cuMemMap", _u64(self.address), _size(size), _size(0), _u64(handle), _u64(0))
            access = _AccessDesc(_Location(_CU_MEM_LOCATION_TYPE_DEVICE, device), _CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            _call("cuMemSetAccess", _u64(self.address), _size(size), ctypes.byref(access), _size(1))
        except DeviceMemoryError:
            _cuda().cuMemAddressFree(_u64(self.address), _size(size))
            raise
        self.closed = False

    def bytes(self) -> torch.Tensor:
        return torch.as_tensor(_ArrayInterface(self), device="cuda")

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        # work still queued on these bytes (a copy taken just before the last tensor on them went) must finish
        # first: unmapping under a running kernel is an illegal address, for the judge itself (seen on the H100 in
        # session 20, when the first trial's reference was cut to its repeats' subsamples and let go at once)
        try:
            torch.cuda.synchronize(self.device)
        except Exception:  # a context already broken: unmapping is all that is left to do
            pass
        driver = _cuda()
        driver.cuMemUnmap(_u64(self.address), _size(self.size))
        driver.cuMemAddressFree(_u64(self.address), _size(self.size))
        driver.cuMemRelease(_u64(self.handle))

    def __del__(self) -> None:
        if sys.is_finalizing():  # the process is ending and takes the memory with it; a driver call now aborts it
            return
        try:
            self.close()
        except Exception:  # the driver may already be gone
            pass


def layout(tensors: list[torch.Tensor]) -> tuple[list[int], int]:
    """Byte offsets of each tensor in one region, and the bytes used."""
    offsets, used = [], 0
    for t in tensors:
        offsets.append(used)
        used += -(-t.numel() * t.element_size() // ALIGN) * ALIGN
    return offsets, used


def export(tensors: list[torch.Tensor]) -> tuple[int, int, list[int]]:
    """Copy `tensors` (CUDA, any layout) into one new exportable allocation; return (fd, size, byte offsets).

    This process keeps no mapping of it: once sent, the bytes are the receiver's alone."""
    device = _device()
    offsets, used = layout(tensors)
    gran = _granularity(device)
    size = max(gran, -(-used // gran) * gran)
    handle = _u64()
    _call("cuMemCreate", ctypes.byref(handle), _size(size), ctypes.byref(_prop(device)), _u64(0))
    mapping = None
    try:
        mapping = _Mapping(handle.value, size, device)
        region = mapping.bytes()
        for t, offset in zip(tensors, offsets):
            nbytes = t.numel() * t.element_size()
            if nbytes:
                region.narrow(0, offset, nbytes).view(t.dtype).copy_(t.detach().reshape(-1))
        torch.cuda.synchronize()
        del region
        fd = ctypes.c_int(-1)
        _call("cuMemExportToShareableHandle", ctypes.byref(fd), _u64(handle.value), _CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, _u64(0))
    except BaseException:
        if mapping is None:
            _cuda().cuMemRelease(handle)
        raise
    finally:
        if mapping is not None:
            mapping.close()  # releases our handle too; the exported descriptor keeps the memory
    return fd.value, size, offsets


@dataclass(frozen=True)
class TensorSpec:
    dtype: torch.dtype
    shape: tuple[int, ...]
    offset: int


def open_region(fd: int, size: int) -> torch.Tensor:
    """Map a received descriptor; the bytes as a uint8 CUDA tensor (closes `fd`; the memory lives as long as the
    tensor or any view of it)."""
    device = _device()
    handle = _u64()
    try:
        _call("cuMemImportFromShareableHandle", ctypes.byref(handle), ctypes.c_void_p(fd), _CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
    finally:
        os.close(fd)
    try:
        mapping = _Mapping(handle.value, size, device)
    except BaseException:
        _cuda().cuMemRelease(handle)
        raise
    return mapping.bytes()


def view(region: torch.Tensor, spec: TensorSpec) -> torch.Tensor:
    """One tensor of a region, as the exporter laid it out."""
    numel = 1
    for n in spec.shape:
        numel *= n
    nbytes = numel * torch.empty((), dtype=spec.dtype).element_size()
    if spec.offset < 0 or spec.offset + nbytes > region.numel() or spec.offset % ALIGN:
        raise DeviceMemoryError(f"a tensor at offset {spec.offset} of {nbytes} bytes does not fit the region of {region.numel()}")
    if nbytes == 0:
        return torch.empty(spec.shape, dtype=spec.dtype, device=region.device)
    return region.narrow(0, spec.offset, nbytes).view(spec.dtype).view(spec.shape)


def available() -> str:
    """'' when this process can use the driver's virtual memory API (libcuda loads), else why not. Whether the
    device supports exporting shows at the first export, which falls back to files if it does not."""
    try:
        _cuda()
        return ""
    except DeviceMemoryError as exc:
        return str(exc)
