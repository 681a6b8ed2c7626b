"""How tensors cross from a worker to the parent.

CUDA: the worker copies the tensors of one reply into one block of exportable device memory and passes
its file descriptor over a Unix socket (SCM_RIGHTS); the parent maps the block and copies each tensor out,
device to device: no bytes pass through host memory or files (``torch.save`` files on /dev/shm cost
seconds per transfer for a 1 GB output, and one evaluation moves outputs a dozen times). If the export
fails (a driver without POSIX-descriptor handles), the worker falls back to a file for that reply.

The block is allocated through the CUDA driver's virtual memory API with POSIX file-descriptor handles
(ctypes on libcuda, :class:`Mapping`), not ``cudaIpcGetMemHandle`` (what torch.multiprocessing uses): a
parent running as root cannot open a legacy IPC handle exported by a worker running as another uid
(``cudaErrorMapBufferObjectFailed``), and sandboxed workers run as fresh uids. A descriptor passed over a
Unix socket carries the right to map the memory itself, whatever the uids.

CPU: a ``torch.save`` file at a path the parent chose, read back with ``weights_only=True``.

The parent never unpickles anything a worker wrote. The descriptor is JSON and is checked before use: the
dtype comes from a fixed list, shapes are non-negative integers, every tensor lies inside the block, and
the block's size is bounded.

This module imports torch and the standard library only: the worker imports it.
"""

from __future__ import annotations

import ctypes
import functools
import os
import socket
from pathlib import Path
from typing import Any

import torch

# --- exportable device memory (the CUDA driver's virtual memory API) ------------------------------------

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


# --- the reply's tensors ---------------------------------------------------------------------------------

TAG = "__cudal1_tensor__"

_DTYPES: dict[str, torch.dtype] = {
    str(d).removeprefix("torch."): d
    for d in (torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.complex64, torch.complex128,
              torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool)
}


class TransportError(ValueError):
    """A worker's reply described tensors the parent cannot (or must not) map."""


# --- worker side ---------------------------------------------------------------------------------------

_ALIGN = 256
MAX_BLOCK = 64 * 2**30  # the parent refuses to map more than this for one reply


def _describe(obj: Any, tensors: list[tuple[torch.Tensor, int]], end: list[int]) -> Any:
    if isinstance(obj, torch.Tensor):
        t = obj.detach()
        if t.device.type != "cuda":
            raise TypeError(f"a tensor on {t.device} cannot travel through device memory")
        desc: dict[str, Any] = {TAG: 1, "dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape)}
        if t.numel() == 0:
            return desc | {"empty": True}
        offset = -(-end[0] // _ALIGN) * _ALIGN
        nbytes = t.numel() * t.element_size()
        end[0] = offset + nbytes
        tensors.append((t, offset))
        return desc | {"offset": offset, "nbytes": nbytes}
    if isinstance(obj, dict):
        return {str(k): _describe(v, tensors, end) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_describe(v, tensors, end) for v in obj]
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise TypeError(f"cannot send a {type(obj).__name__} to the parent")


def pack(obj: Any, keep: list[Any], sock: socket.socket | None) -> dict[str, Any]:
    """Worker side: ``obj`` as JSON with its CUDA tensors copied into one exported block whose descriptor
    goes to the parent over ``sock``. The block is appended to ``keep``: the worker holds it until its
    next command, by which time the parent has copied it."""
    tensors: list[tuple[torch.Tensor, int]] = []
    end = [0]
    payload = _describe(obj, tensors, end)
    if not tensors:
        return {"payload": payload}
    if sock is None:
        raise RuntimeError("no descriptor socket to the parent")
    device = tensors[0][0].device
    mapping = Mapping.allocate(end[0], device)
    try:
        for t, offset in tensors:
            nbytes = t.numel() * t.element_size()
            mapping.bytes[offset:offset + nbytes].view(t.dtype).view(t.shape).copy_(t)
        torch.cuda.synchronize(device)
        socket.send_fds(sock, [b"cudal1"], [mapping.fd])
    except BaseException:
        mapping.release()
        raise
    keep.append(mapping)
    return {"payload": payload, "block": mapping.size}


def ship(obj: Any, out_path: str | None, cuda: bool, keep: list[Any], sock: socket.socket | None = None
         ) -> dict[str, Any]:
    """Worker side: the reply fields that carry ``obj`` — an exported block on CUDA, else a file (also the
    fallback when the export fails)."""
    note = {}
    if cuda:
        try:
            return pack(obj, keep, sock)
        except (RuntimeError, OSError, TypeError) as exc:
            note = {"transport_fallback": str(exc)[:300]}
    if out_path is None:
        raise ValueError("a worker needs an out_path to write tensors to")
    torch.save(obj, out_path)
    return {"payload_file": True} | note


# --- parent side ---------------------------------------------------------------------------------------

def _int_list(value: Any, what: str) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                                              for v in value):
        raise TransportError(f"{what} is not a list of non-negative integers")
    return value


def _unpack_tensor(desc: dict[str, Any], device: torch.device, block: Mapping | None) -> torch.Tensor:
    dtype = _DTYPES.get(desc.get("dtype"))  # type: ignore[arg-type]
    if dtype is None:
        raise TransportError(f"unsupported dtype {desc.get('dtype')!r}")
    shape = _int_list(desc.get("shape"), "shape")
    numel = 1
    for s in shape:
        numel *= s
    if desc.get("empty"):
        if numel:
            raise TransportError("a tensor with elements but no storage (lazy or fake)")
        return torch.empty(shape, dtype=dtype, device=device)
    offset, nbytes = desc.get("offset"), desc.get("nbytes")
    itemsize = torch.empty((), dtype=dtype).element_size()
    if not isinstance(offset, int) or not isinstance(nbytes, int) or offset < 0 or offset % _ALIGN \
            or nbytes != numel * itemsize:
        raise TransportError("inconsistent tensor layout")
    if block is None:
        raise TransportError("a tensor described without the block that holds it")
    if offset + nbytes > block.size:
        raise TransportError(f"a tensor at bytes {offset}..{offset + nbytes} lies outside the {block.size}-byte block")
    return block.bytes[offset:offset + nbytes].view(dtype).view(shape).clone()  # the parent's own copy


def unpack(obj: Any, device: torch.device | str, block: Mapping | None = None) -> Any:
    """Parent side: ``obj`` with every descriptor replaced by the parent's own copy of the tensor."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    out = _unpack(obj, device, block)
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # copies done: the block may be unmapped
    return out


def _unpack(obj: Any, device: torch.device, block: Mapping | None) -> Any:
    if isinstance(obj, dict):
        if obj.get(TAG) == 1:
            try:
                return _unpack_tensor(obj, device, block)
            except TransportError:
                raise
            except (RuntimeError, ValueError, TypeError) as exc:
                raise TransportError(f"could not read a tensor the worker exported: {exc}") from exc
        return {k: _unpack(v, device, block) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_unpack(v, device, block) for v in obj]
    return obj


def receive_fd(sock: socket.socket, timeout_s: float = 30.0) -> int:
    """The one descriptor the worker sent with its reply; anything else on the socket is refused."""
    sock.settimeout(timeout_s)
    try:
        _msg, fds, _flags, _addr = socket.recv_fds(sock, 64, 8)
    except (TimeoutError, OSError) as exc:
        raise TransportError(f"no device-memory descriptor arrived: {exc}") from exc
    if len(fds) != 1:
        for fd in fds:
            os.close(fd)
        raise TransportError(f"expected one device-memory descriptor, got {len(fds)}")
    return fds[0]


def drain(sock: socket.socket) -> None:
    """Close whatever descriptors are waiting (sent by anyone but the harness, or left by a failed call)."""
    sock.setblocking(False)
    try:
        while True:
            _msg, fds, _flags, _addr = socket.recv_fds(sock, 64, 8)
            for fd in fds:
                os.close(fd)
            if not _msg and not fds:
                break
    except (BlockingIOError, OSError):
        pass
    finally:
        sock.setblocking(True)


def receive(reply: dict[str, Any], path: Path, device: torch.device | str, sock: socket.socket | None = None
            ) -> Any:
    """Parent side: what a worker's reply carried — from an exported block, or from the file at ``path``
    (then removed)."""
    if "payload" in reply:
        size = reply.get("block")
        if size is None:
            return unpack(reply["payload"], device)
        if not isinstance(size, int) or not 0 < size <= MAX_BLOCK or sock is None:
            raise TransportError(f"a device-memory block of {size!r} bytes")
        fd = receive_fd(sock)
        try:
            block = Mapping.import_fd(fd, size, torch.device(device))
        except RuntimeError as exc:
            raise TransportError(f"could not map the worker's block: {exc}") from exc
        finally:
            os.close(fd)
        try:
            return unpack(reply["payload"], device, block)
        finally:
            block.release()
    if not path.exists():
        raise TransportError("the worker wrote no result file")
    try:
        return torch.load(path, weights_only=True, map_location=device)  # never unpickle arbitrary objects
    finally:
        path.unlink(missing_ok=True)
