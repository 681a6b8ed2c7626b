"""A timed call's output staged for its fingerprint by one driver call instead of ``Tensor.copy_``.

Per timed call the harness copies each output into a row of a staging buffer (probes.Fingerprints).
``copy_`` cost 11.3 us of host time for 16 elements on the H100 host (its dispatch and TensorIterator set
up a copy that may convert dtypes and strides), 14.1 us as a step of the timed loop
(docs/gpu-runs.md#2026-11-25-host-clock), all of it between the end of one timed call and the next call's
L2 flush. Where the output is dense in memory order with the row's dtype on the row's device, the copy is
the output's bytes in memory order: ``cuMemcpyDtoDAsync`` on the stream torch would have used does the
same in one driver call. Anything else (another dtype, a gap or an overlap, another device, no driver)
keeps ``copy_``.

The driver function is bound by :func:`bind` when the worker starts, before any program code runs, and the
worker checks it for identity after every command like its other harness functions. A program that broke
the copy anyway would leave rows it never filled: their fingerprints differ from the reference's.

torch and the standard library only: the GPU evaluation worker imports it.
"""

from __future__ import annotations

import ctypes
from typing import Any

import torch

_memcpy: Any = None  # cuMemcpyDtoDAsync_v2(dst, src, bytes, stream) -> CUresult, once bound
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # the current stream's handle, ~0.3 us


def bind() -> bool:
    """Load the driver's copy (a CUDA worker calls this at start). False where there is no driver."""
    global _memcpy
    if _memcpy is not None:
        return True
    try:
        fn = ctypes.CDLL("libcuda.so.1").cuMemcpyDtoDAsync_v2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p]
    fn.restype = ctypes.c_int
    _memcpy = fn
    return True


def bound() -> Any:
    """The bound driver function (for the worker's identity check), or None."""
    return _memcpy


def stage(dst: torch.Tensor, src: torch.Tensor) -> None:
    """``dst.copy_(src)`` for a contiguous staging row ``dst``, by one driver copy where that is the same
    thing: ``src`` contiguous (a permuted view of a dense output is), same dtype, same CUDA device."""
    fn = _memcpy
    if (fn is not None and src.dtype is dst.dtype and src.is_cuda and src.get_device() == dst.get_device()
            and src.is_contiguous() and src.numel() == dst.numel()):
        n = dst.numel() * dst.element_size()
        if n == 0:
            return
        index = dst.get_device()
        stream = _raw_stream(index) if _raw_stream is not None else torch.cuda.current_stream(index).cuda_stream
        # The stream torch would have run copy_ on, so the sums taken later on that stream are ordered after it
        if fn(dst.data_ptr(), src.data_ptr(), n, stream) == 0:
            return
    dst.copy_(src)
