"""Device-memory transport between a (sandboxed) worker and the parent: values arrive intact, the parent
holds its own copy, and a descriptor that points outside the exported block is refused.

Run on the device machine: ``PYTHONPATH=. python -m pytest -m gpu tests/gpu``.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cudal1.evaluator import EvalConfig
from cudal1.evaluator.references import ReferenceSession
from cudal1.evaluator.transport import TransportError, receive
from cudal1.problems import Problem

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

SOURCE = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x, k: int):
        return torch.relu(x) * k, x.sum(dim=1)

def get_inputs():
    return [torch.randn(64, 1000), 3]

def get_init_inputs():
    return []
'''


def test_reference_records_arrive_by_ipc_intact() -> None:
    problem = Problem("ipc-1", 1, "relu_scale", SOURCE)
    with ReferenceSession(problem, EvalConfig(device="cuda:0")) as session:
        records = session.records([11, 12])
    for record, seed in zip(records, (11, 12)):
        torch.manual_seed(seed)
        with torch.device("cuda:0"):
            x = torch.randn(64, 1000)
        assert record["seed"] == seed and record["inputs"][1] == 3
        assert record["inputs"][0].device.type == "cuda" and torch.equal(record["inputs"][0], x)
        assert torch.equal(record["outputs"][0], torch.relu(x) * 3)
        assert torch.allclose(record["outputs"][1], x.sum(dim=1))


_EXPORTER = '''
import json, socket, sys, torch
from cudal1.evaluator.transport import pack
sock = socket.socket(fileno=int(sys.argv[1]))
keep = []
t = torch.arange(12, dtype=torch.float32, device="cuda:0")
for _ in range(2):
    print(json.dumps(pack([t, t[4:8], 3], keep, sock)), flush=True)
sys.stdin.read()
'''


def test_parent_maps_blocks_and_refuses_out_of_bounds() -> None:
    repo = Path(__file__).resolve().parents[2]
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    proc = subprocess.Popen([sys.executable, "-c", _EXPORTER, str(child.fileno())], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, pass_fds=[child.fileno()],
                            env={"PYTHONPATH": str(repo), "PATH": "/usr/bin:/bin"})
    child.close()
    try:
        assert proc.stdout is not None
        reply = json.loads(proc.stdout.readline())
        whole, view, k = receive(reply, Path("/nonexistent"), "cuda:0", parent)
        assert torch.equal(whole, torch.arange(12.0, device="cuda:0"))
        assert torch.equal(view, torch.arange(4.0, 8.0, device="cuda:0")) and k == 3
        reply = json.loads(proc.stdout.readline())
        reply["payload"][1]["offset"] = reply["block"]  # past the end of the block
        with pytest.raises(TransportError, match="outside"):
            receive(reply, Path("/nonexistent"), "cuda:0", parent)
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait(timeout=30)
        parent.close()
