"""Device memory one process exports and another maps, through the CUDA driver's virtual memory API
with POSIX file-descriptor handles (ctypes on libcuda; torch and the standard library only).

Why not ``cudaIpcGetMemHandle`` (what torch.multiprocessing uses): measured on the H100 machine, a parent
running as root cannot open a legacy IPC handle exported by a worker running as another uid
(``cudaErrorMapBufferObjectFailed``), and sandboxed workers run as fresh uids. A file descriptor passed
over a Unix socket (SCM_RIGHTS) carries the right to map the memory itself, whatever the uids.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import torch

_POSIX_FD = 1  # CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
_PINNED = 1  # CU_MEM_ALLOCATION_TYPE_PINNED
_ON_DEVICE = 1  # CU_MEM_LOCATION_TYPE_DEVICE
_READ_WRITE = 3  # CU_MEM_ACCESS_FLAGS_PROT_READWRITE
_u64 = ctypes.c_ulonglong


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _Prop(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", _Location),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", _AllocFlags)]


class _Access(ctypes.Structure):
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


@functools.cache
def _driver() -> Any:
    lib = ctypes.CDLL("libcuda.so.1")
    sigs = {
        "cuMemGetAllocationGranularity": [ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(_Prop), ctypes.c_int],
        "cuMemCreate": [ctypes.POINTER(_u64), ctypes.c_size_t, ctypes.POINTER(_Prop), _u64],
        "cuMemAddressReserve": [ctypes.POINTER(_u64), ctypes.c_size_t, ctypes.c_size_t, _u64, _u64],
        "cuMemMap": [_u64, ctypes.c_size_t, ctypes.c_size_t, _u64, _u64],
        "cuMemSetAccess": [_u64, ctypes.c_size_t, ctypes.POINTER(_Access), ctypes.c_size_t],
        "cuMemExportToShareableHandle": [ctypes.c_void_p, _u64, ctypes.c_int, _u64],
        "cuMemImportFromShareableHandle": [ctypes.POINTER(_u64), ctypes.c_void_p, ctypes.c_int],
        "cuMemUnmap": [_u64, ctypes.c_size_t],
        "cuMemRelease": [_u64],
        "cuMemAddressFree": [_u64, ctypes.c_size_t],
        "cuGetErrorName": [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)],
    }
    for name, args in sigs.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, ctypes.c_int
    return lib


def _check(result: int, what: str) -> None:
    if result != 0:
        name = ctypes.c_char_p()
        _driver().cuGetErrorName(result, ctypes.byref(name))
        raise RuntimeError(f"{what} failed: CUDA driver error {result} ({(name.value or b'?').decode()})")


def _prop(device: int) -> _Prop:
    prop = _Prop()
    prop.type, prop.requestedHandleTypes = _PINNED, _POSIX_FD
    prop.location = _Location(_ON_DEVICE, device)
    return prop


def _current(device: torch.device) -> int:
    """Make the device's primary context current on this thread (driver calls need one)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    torch.cuda.set_device(index)
    torch.cuda.current_stream(index).synchronize()  # initialises the context if nothing has yet
    return index


class _Array:
    """A raw device range seen by torch through the CUDA array interface (no copy, no ownership)."""

    def __init__(self, ptr: int, nbytes: int) -> None:
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False),
                                         "version": 3, "strides": None}


class Mapping:
    """A mapped range of exportable device memory; ``bytes`` views it as a uint8 tensor."""

    def __init__(self, device: torch.device, ptr: int, size: int, handle: int) -> None:
        self.device, self.ptr, self.size, self.handle = device, ptr, size, handle
        self.bytes = torch.as_tensor(_Array(ptr, size), device=device)
        self.fd = -1

    @classmethod
    def allocate(cls, nbytes: int, device: torch.device) -> Mapping:
        """Worker side: new device memory of at least ``nbytes``, exportable as a file descriptor."""
        index = _current(device)
        lib, prop = _driver(), _prop(index)
        granularity = ctypes.c_size_t()
        _check(lib.cuMemGetAllocationGranularity(ctypes.byref(granularity), ctypes.byref(prop), 0), "granularity")
        size = -(-max(nbytes, 1) // granularity.value) * granularity.value
        handle = _u64()
        _check(lib.cuMemCreate(ctypes.byref(handle), size, ctypes.byref(prop), 0), "cuMemCreate")
        try:
            mapping = cls._map(torch.device("cuda", index), handle.value, size)
        except RuntimeError:
            lib.cuMemRelease(handle.value)
            raise
        fd = ctypes.c_int(-1)
        try:
            _check(lib.cuMemExportToShareableHandle(ctypes.byref(fd), handle.value, _POSIX_FD, 0), "export")
        except RuntimeError:
            mapping.release()
            raise
        mapping.fd = fd.value
        return mapping

    @classmethod
    def import_fd(cls, fd: int, size: int, device: torch.device) -> Mapping:
        """Parent side: map ``size`` bytes of the memory behind a descriptor another process exported."""
        index = _current(device)
        handle = _u64()
        _check(_driver().cuMemImportFromShareableHandle(ctypes.byref(handle), ctypes.c_void_p(fd), _POSIX_FD),
               "import")
        try:
            return cls._map(torch.device("cuda", index), handle.value, size)
        except RuntimeError:
            _driver().cuMemRelease(handle.value)
            raise

    @classmethod
    def _map(cls, device: torch.device, handle: int, size: int) -> Mapping:
        lib = _driver()
        ptr = _u64()
        _check(lib.cuMemAddressReserve(ctypes.byref(ptr), size, 0, 0, 0), "address reserve")
        try:
            _check(lib.cuMemMap(ptr.value, size, 0, handle, 0), "map")
        except RuntimeError:
            lib.cuMemAddressFree(ptr.value, size)
            raise
        access = _Access(_Location(_ON_DEVICE, device.index), _READ_WRITE)
        result = lib.cuMemSetAccess(ptr.value, size, ctypes.byref(access), 1)
        if result != 0:
            lib.cuMemUnmap(ptr.value, size)
            lib.cuMemAddressFree(ptr.value, size)
            _check(result, "set access")
        return cls(device, ptr.value, size, handle)

    def release(self) -> None:
        """Unmap and free (the memory itself goes when every process that mapped it has let go)."""
        if self.ptr == 0:
            return
        import os

        torch.cuda.synchronize(self.device)
        self.bytes = torch.empty(0, dtype=torch.uint8)
        lib = _driver()
        lib.cuMemUnmap(self.ptr, self.size)
        lib.cuMemAddressFree(self.ptr, self.size)
        lib.cuMemRelease(self.handle)
        self.ptr = 0
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
