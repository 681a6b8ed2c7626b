"""Shared by the `cudal1 optimize` tests: a module written for them, a light protocol, and a local HTTP
server that misbehaves the ways an endpoint can (answers that are not the API, answers that never come)."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from cudal1.evaluator import EvalConfig

# Not a starter problem: a ring buffer rotated through many small views and copies. The forward is
# dispatch-bound, so the template teacher's inference_mode rewrite (no view or version tracking) runs
# it about 1.6x faster on a CPU core; no_grad changes nothing (the evaluator already runs under it).
RING = '''"""Rotate a small ring buffer step by step."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, steps: int = 100):
        super().__init__()
        self.steps = steps

    def forward(self, x):
        for _ in range(self.steps):
            x = x.view(8, 8).t().unsqueeze(0).squeeze(0).t().reshape(64)[1:]
            x = torch.cat([x, x[:1]])
        return x * 2.0


def get_inputs():
    return [torch.randn(64)]


def get_init_inputs():
    return [100]
'''

FAST = EvalConfig(correctness_trials=2, timing_trials=5, target_trial_ms=10.0, warmup_iters=1)

class _Handler(http.server.BaseHTTPRequestHandler):
    behaviour = "html"

    def _send(self, body: bytes, ctype: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if self.behaviour == "html":
            self._send(b"<html>a web page, not an API</html>", "text/html")
        else:
            self._send(json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode(),
                       "application/json")

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.behaviour == "hang":
            time.sleep(30)  # longer than any request timeout the tests set
            return
        if self.behaviour == "no_choices":
            self._send(b'{"error": "overloaded"}', "application/json")
        else:
            self._send(b"<html>a web page, not an API</html>", "text/html")

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def bad_endpoint(behaviour: str) -> Iterator[str]:
    """A local server at ``http://127.0.0.1:PORT/v1``: ``html`` answers every request with a web page,
    ``no_choices`` lists a model but answers completions with JSON that is no completion, ``hang`` lists
    a model and never answers a completion."""
    handler = type("Handler", (_Handler,), {"behaviour": behaviour})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/v1"
    finally:
        server.shutdown()
        server.server_close()
