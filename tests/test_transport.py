"""The parent's side of tensor transport: it must refuse descriptors it cannot or must not read (the
worker that wrote them runs untrusted code), and the CPU file path must round-trip. The block reader is
exercised here on a CPU byte buffer standing in for the mapped device block; the real export and import
through the CUDA driver run in tests/gpu/test_gpu_transport.py."""

from __future__ import annotations

import socket
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from cudal1.evaluator.transport import TAG, TransportError, drain, pack, receive, receive_fd, ship, unpack


def _block(values: torch.Tensor) -> SimpleNamespace:
    raw = values.contiguous().view(torch.uint8).reshape(-1)
    padded = torch.cat([raw, torch.zeros(512, dtype=torch.uint8)])
    return SimpleNamespace(size=padded.numel(), bytes=padded)


def _desc(**changes: object) -> dict:
    return {TAG: 1, "dtype": "float32", "shape": [2, 3], "offset": 0, "nbytes": 24} | changes


def test_reads_tensors_out_of_the_block() -> None:
    values = torch.arange(6.0).reshape(2, 3)
    out = unpack({"outputs": [_desc(), 2.5], "seed": 7}, "cpu", _block(values))
    assert torch.equal(out["outputs"][0], values) and out["outputs"][1] == 2.5 and out["seed"] == 7


@pytest.mark.parametrize("changes, message", [
    ({"dtype": "object"}, "unsupported dtype"),
    ({"dtype": "float32; import os"}, "unsupported dtype"),
    ({"shape": [2, -3]}, "non-negative"),
    ({"shape": [True, 3]}, "non-negative"),
    ({"shape": "2,3"}, "non-negative"),
    ({"nbytes": 4096}, "inconsistent"),  # more bytes than the shape holds
    ({"offset": 4}, "inconsistent"),  # not aligned
    ({"offset": -256}, "inconsistent"),
    ({"offset": 1 << 20}, "outside"),  # past the end of the block
    ({"empty": True}, "no storage"),  # elements claimed, no memory
])
def test_refuses_malformed_descriptors(changes: dict, message: str) -> None:
    with pytest.raises(TransportError, match=message):
        unpack({"outputs": [_desc(**changes)]}, "cpu", _block(torch.zeros(6)))


def test_refuses_a_tensor_without_its_block() -> None:
    with pytest.raises(TransportError, match="without the block"):
        unpack([_desc()], "cpu")
    with pytest.raises(TransportError, match="block of"):
        receive({"payload": [_desc()], "block": -5}, Path("/nonexistent"), "cpu", None)


def test_empty_tensors_and_scalars_pass_through() -> None:
    out = unpack({"a": [_desc(shape=[0, 3], empty=True), 1.5, None, "single"]}, "cpu")
    assert out["a"][0].shape == (0, 3) and out["a"][0].dtype == torch.float32
    assert out["a"][1:] == [1.5, None, "single"]


def test_pack_without_tensors_needs_no_device() -> None:
    keep: list = []
    assert pack({"seed": 3, "v": [1.0, True]}, keep, None) == {"payload": {"seed": 3, "v": [1.0, True]}}
    assert keep == []
    with pytest.raises(TypeError, match="device memory"):
        pack([torch.ones(2)], keep, None)
    with pytest.raises(TypeError, match="cannot send"):
        pack({"x": object()}, keep, None)


def test_cpu_file_round_trip_and_fallback(tmp_path: Path) -> None:
    path = tmp_path / "out.pt"
    payload = {"outputs": [torch.arange(6.0).reshape(2, 3)], "inputs_after": [torch.ones(3), 4]}
    reply = ship(payload, str(path), cuda=False, keep=[])
    assert reply == {"payload_file": True}
    got = receive(reply, path, "cpu")
    assert torch.equal(got["outputs"][0], payload["outputs"][0]) and got["inputs_after"][1] == 4
    assert not path.exists()  # read once, then removed
    with pytest.raises(TransportError, match="no result file"):
        receive(reply, path, "cpu")
    # A CUDA worker whose export fails (here: CPU tensors) falls back to the file and says so.
    reply = ship(payload, str(path), cuda=True, keep=[])
    assert reply["payload_file"] and "device memory" in reply["transport_fallback"]
    assert torch.equal(receive(reply, path, "cpu")["outputs"][0], payload["outputs"][0])


def test_descriptor_socket_refuses_stray_or_missing_fds(tmp_path: Path) -> None:
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with parent, child, open(tmp_path / "a", "w") as a, open(tmp_path / "b", "w") as b:
        with pytest.raises(TransportError, match="no device-memory descriptor"):
            receive_fd(parent, timeout_s=0.2)
        socket.send_fds(child, [b"x"], [a.fileno(), b.fileno()])
        with pytest.raises(TransportError, match="expected one"):
            receive_fd(parent)
        socket.send_fds(child, [b"x"], [a.fileno()])  # left over from an earlier command: drained
        drain(parent)
        with pytest.raises(TransportError, match="no device-memory descriptor"):
            receive_fd(parent, timeout_s=0.2)
