"""How tensors cross from a worker to the parent.

CUDA: the worker copies the tensors of one reply into one block of exportable device memory
(:mod:`cudal1.evaluator.cuda_vmm`) and passes its file descriptor over a Unix socket (SCM_RIGHTS); the
parent maps the block and copies each tensor out, device to device: no bytes pass through host memory or
files. Through ``torch.save`` files on /dev/shm a 1 GB output cost seconds per transfer on the H200
(docs/gpu-runs.md#2026-11-22-release-probe), and one evaluation moves outputs a dozen times. If the export fails (a driver
without POSIX-descriptor handles), the worker falls back to a file for that reply.

CPU: a ``torch.save`` file at a path the parent chose, read back with ``weights_only=True``.

The parent never unpickles anything a worker wrote. The descriptor is JSON and is checked before use: the
dtype comes from a fixed list, shapes are non-negative integers, every tensor lies inside the block, and
the block's size is bounded.

This module imports torch and the standard library only: the worker imports it.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import torch

from cudal1.evaluator.cuda_vmm import Mapping

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
