"""Devices a user asks for, checked where params or command-line options are read: a CUDA device that
this torch cannot reach stops the run at once, with the device and the fix, instead of failing later in a
worker (or, worse, being timed as the CPU). torch is imported only when a CUDA device is asked for."""

from __future__ import annotations

import re
from collections.abc import Sequence

_CUDA = re.compile(r"^cuda(?::(\d+))?$")


class DeviceUnavailable(ValueError):
    """A device in the params or options does not exist here; the message names it and the fix."""


def check_devices(devices: Sequence[str], where: str) -> None:
    """Stop with :class:`DeviceUnavailable` unless every device is ``cpu`` or a CUDA device torch sees.

    >>> check_devices(["cpu"], "augment.devices")
    >>> check_devices(["gpu0"], "--device")
    Traceback (most recent call last):
    ...
    cudal1.devices.DeviceUnavailable: --device: 'gpu0' is not a device; use cpu or cuda:N (cuda:0 is the first GPU)
    """
    for device in devices:
        if device == "cpu":
            continue
        match = _CUDA.match(device)
        if match is None:
            raise DeviceUnavailable(f"{where}: {device!r} is not a device; use cpu or cuda:N (cuda:0 is the first GPU)")
        _check_cuda(device, int(match.group(1) or 0), where)


def _check_cuda(device: str, index: int, where: str) -> None:
    import torch

    if torch.version.cuda is None:
        raise DeviceUnavailable(
            f"{where}: {device} asked for, but this torch ({torch.__version__}) is a CPU build without CUDA. "
            "Install a CUDA build of torch into the environment first (docs/guides/gpu.md, section 1), "
            "or use cpu.")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        raise DeviceUnavailable(
            f"{where}: {device} asked for, but torch {torch.__version__} (CUDA {torch.version.cuda}) sees no GPU: "
            "check the driver (`nvidia-smi`) and that CUDA_VISIBLE_DEVICES is not empty, or use cpu.")
    if index >= count:
        visible = ", ".join(f"cuda:{i}" for i in range(count))
        raise DeviceUnavailable(
            f"{where}: {device} asked for, but torch sees {count} GPU{'s' if count > 1 else ''} ({visible}); "
            "use one of those (CUDA_VISIBLE_DEVICES numbers the visible GPUs from cuda:0).")
