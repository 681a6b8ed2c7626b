"""How tensors cross from a worker to the parent.

CUDA: the worker exports each tensor's storage as a CUDA IPC handle (the mechanism torch.multiprocessing
uses) and the parent maps it and copies it device to device: no bytes pass through host memory or files.
Through ``torch.save`` files on /dev/shm a 1 GB output cost seconds per transfer on the H200 (run C in
docs/gpu-runs.md), and a full evaluation moves outputs a dozen times.

CPU: a ``torch.save`` file at a path the parent chose, read back with ``weights_only=True``.

The parent never unpickles anything a worker wrote. The IPC descriptor is JSON (handles in base64) and is
checked before use: the dtype comes from a fixed list, sizes and strides are non-negative integers, the
device is the one the parent expects, and ``set_`` refuses a view that does not fit the exported storage.

This module imports torch and the standard library only: the worker imports it.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import torch

TAG = "__cudal1_tensor__"

_DTYPES: dict[str, torch.dtype] = {
    str(d).removeprefix("torch."): d
    for d in (torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.complex64, torch.complex128,
              torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool)
}


class TransportError(ValueError):
    """A worker's reply described tensors the parent cannot (or must not) map."""


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def _unb64(text: Any) -> bytes | None:
    if text is None:
        return None
    if not isinstance(text, str):
        raise TransportError("an IPC handle is not a string")
    return base64.b64decode(text.encode("ascii"), validate=True)


# --- worker side ---------------------------------------------------------------------------------------

def pack(obj: Any, keep: list[torch.Tensor]) -> Any:
    """A JSON-able copy of ``obj`` (lists, tuples, dicts, scalars) with every CUDA tensor replaced by an
    IPC descriptor. Exported tensors are appended to ``keep``: the worker holds them until its next
    command, by which time the parent has copied them."""
    if isinstance(obj, torch.Tensor):
        return _pack_tensor(obj, keep)
    if isinstance(obj, dict):
        return {str(k): pack(v, keep) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [pack(v, keep) for v in obj]
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise TypeError(f"cannot send a {type(obj).__name__} to the parent")


def _pack_tensor(t: torch.Tensor, keep: list[torch.Tensor]) -> dict[str, Any]:
    t = t.detach()
    if t.device.type != "cuda":
        raise TypeError(f"a tensor on {t.device} cannot travel by CUDA IPC")
    desc: dict[str, Any] = {TAG: 1, "dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape),
                            "stride": list(t.stride()), "offset": t.storage_offset()}
    storage = t.untyped_storage()
    if t.numel() == 0 or storage.nbytes() == 0:
        desc["empty"] = True
        return desc
    device, handle, size, storage_offset, ref, ref_offset, event, sync = storage._share_cuda_()
    keep.append(t)
    desc.update(device=int(device), handle=_b64(handle), size=int(size), storage_offset=int(storage_offset),
                ref=_b64(ref), ref_offset=int(ref_offset), event=_b64(event), sync=bool(sync))
    return desc


def ship(obj: Any, out_path: str | None, cuda: bool, keep: list[torch.Tensor]) -> dict[str, Any]:
    """Worker side: the reply fields that carry ``obj`` — IPC descriptors on CUDA, else a file."""
    if cuda:
        return {"payload": pack(obj, keep)}
    if out_path is None:
        raise ValueError("a CPU worker needs an out_path to write tensors to")
    torch.save(obj, out_path)
    return {"payload_file": True}


# --- parent side ---------------------------------------------------------------------------------------

def _int_list(value: Any, what: str) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                                              for v in value):
        raise TransportError(f"{what} is not a list of non-negative integers")
    return value


def _unpack_tensor(desc: dict[str, Any], device: torch.device) -> torch.Tensor:
    dtype = _DTYPES.get(desc.get("dtype"))  # type: ignore[arg-type]
    if dtype is None:
        raise TransportError(f"unsupported dtype {desc.get('dtype')!r}")
    shape = _int_list(desc.get("shape"), "shape")
    stride = _int_list(desc.get("stride"), "stride")
    offset = desc.get("offset")
    if len(stride) != len(shape) or not isinstance(offset, int) or offset < 0:
        raise TransportError("inconsistent tensor layout")
    if desc.get("empty"):
        numel = 1
        for s in shape:
            numel *= s
        if numel:
            raise TransportError("a tensor with elements but no storage (lazy or fake)")
        return torch.empty(shape, dtype=dtype, device=device)
    if device.type != "cuda" or desc.get("device") != device.index:
        raise TransportError(f"a tensor exported from cuda:{desc.get('device')}, expected {device}")
    for key in ("size", "storage_offset", "ref_offset"):
        if not isinstance(desc.get(key), int) or desc[key] < 0:
            raise TransportError(f"bad {key}")
    storage = torch.UntypedStorage._new_shared_cuda(  # type: ignore[attr-defined]
        device.index, _unb64(desc.get("handle")), desc["size"], desc["storage_offset"], _unb64(desc.get("ref")),
        desc["ref_offset"], _unb64(desc.get("event")), bool(desc.get("sync")))
    view = torch.empty((0,), dtype=dtype, device=device)
    view.set_(storage, offset, shape, stride)  # raises when the view does not fit the storage
    return view.clone()  # the parent's own copy; the mapping is released when `storage` dies


def unpack(obj: Any, device: torch.device | str) -> Any:
    """Parent side: ``obj`` with every descriptor replaced by the parent's own copy of the tensor."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    out = _unpack(obj, device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # copies done: the worker may free or reuse the memory
    return out


def _unpack(obj: Any, device: torch.device) -> Any:
    if isinstance(obj, dict):
        if obj.get(TAG) == 1:
            try:
                return _unpack_tensor(obj, device)
            except TransportError:
                raise
            except (RuntimeError, ValueError, TypeError) as exc:
                raise TransportError(f"could not map a tensor the worker exported: {exc}") from exc
        return {k: _unpack(v, device) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_unpack(v, device) for v in obj]
    return obj


def receive(reply: dict[str, Any], path: Path, device: torch.device | str) -> Any:
    """Parent side: what a worker's reply carried, by IPC or by the file at ``path`` (then removed)."""
    if "payload" in reply:
        return unpack(reply["payload"], device)
    if not path.exists():
        raise TransportError("the worker wrote no result file")
    try:
        return torch.load(path, weights_only=True, map_location=device)  # never unpickle arbitrary objects
    finally:
        path.unlink(missing_ok=True)
