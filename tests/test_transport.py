"""The parent's side of tensor transport: it must refuse descriptors it cannot or must not map (the
worker that wrote them runs untrusted code), and the CPU file path must round-trip."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from cudal1.evaluator.transport import TAG, TransportError, pack, receive, ship, unpack


def _desc(**changes: object) -> dict:
    base = {TAG: 1, "dtype": "float32", "shape": [2, 3], "stride": [3, 1], "offset": 0, "device": 0,
            "handle": "AAAA", "size": 24, "storage_offset": 0, "ref": None, "ref_offset": 0, "event": None,
            "sync": False}
    return base | changes


@pytest.mark.parametrize("changes, message", [
    ({"dtype": "object"}, "unsupported dtype"),
    ({"dtype": "float32; import os"}, "unsupported dtype"),
    ({"shape": [2, -3]}, "non-negative"),
    ({"stride": [3]}, "inconsistent"),
    ({"stride": [3.0, 1]}, "non-negative"),
    ({"offset": -1}, "inconsistent"),
    ({"shape": [True, 3]}, "non-negative"),
    ({"empty": True}, "no storage"),
])
def test_unpack_refuses_malformed_descriptors(changes: dict, message: str) -> None:
    with pytest.raises(TransportError, match=message):
        unpack({"outputs": [_desc(**changes)]}, "cpu")


def test_unpack_refuses_ipc_onto_a_cpu_parent() -> None:
    with pytest.raises(TransportError, match="expected cpu"):
        unpack([_desc()], "cpu")


def test_empty_tensors_and_scalars_pass_through() -> None:
    out = unpack({"a": [_desc(shape=[0, 3], empty=True), 1.5, None, "single"]}, "cpu")
    assert out["a"][0].shape == (0, 3) and out["a"][0].dtype == torch.float32
    assert out["a"][1:] == [1.5, None, "single"]


def test_pack_refuses_cpu_tensors_and_objects() -> None:
    with pytest.raises(TypeError, match="CUDA IPC"):
        pack([torch.ones(2)], [])
    with pytest.raises(TypeError, match="cannot send"):
        pack({"x": object()}, [])
    keep: list[torch.Tensor] = []
    assert pack({"seed": 3, "v": [1.0, True]}, keep) == {"seed": 3, "v": [1.0, True]} and keep == []


def test_cpu_file_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "out.pt"
    payload = {"outputs": [torch.arange(6.0).reshape(2, 3)], "inputs_after": [torch.ones(3), 4]}
    reply = ship(payload, str(path), cuda=False, keep=[])
    assert reply == {"payload_file": True}
    got = receive(reply, path, "cpu")
    assert torch.equal(got["outputs"][0], payload["outputs"][0]) and got["inputs_after"][1] == 4
    assert not path.exists()  # read once, then removed
    with pytest.raises(TransportError, match="no result file"):
        receive(reply, path, "cpu")
