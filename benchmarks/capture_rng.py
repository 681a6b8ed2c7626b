"""What a program's failed CUDA graph capture leaves in the device's default generator, and which way of
drawing inputs still works after it (docs/gpu-runs.md, L2-5's "Offset increment outside graph capture").

    PYTHONPATH=. python3 benchmarks/capture_rng.py

Prints one line per check; needs a CUDA device.
"""

from __future__ import annotations

import torch


def failed_capture() -> None:
    """A capture that fails part-way, caught and passed over, as L2-5's program does in its forward."""
    x = torch.ones(4, device="cuda")
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            y = x * 2
            y.sum().item()  # a sync inside the capture invalidates it
    except Exception as exc:  # noqa: BLE001 - the point is what is left after
        print("capture failed:", type(exc).__name__, str(exc).splitlines()[0][:120])


def check(name: str, fn) -> None:  # noqa: ANN001
    try:
        fn()
        torch.cuda.synchronize()
        print(f"{name}: ok")
    except Exception as exc:  # noqa: BLE001
        print(f"{name}: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}")


def main() -> None:
    torch.zeros(1, device="cuda")
    default = torch.cuda.default_generators[torch.cuda.current_device()]
    private = torch.Generator(device="cuda")
    # a graph of draws from the private generator, captured before the program runs, as the harness does
    graph = torch.cuda.CUDAGraph()
    graph.register_generator_state(private)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.randn(8, device="cuda", generator=private)
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        made = torch.randn(8, device="cuda", generator=private)
    check("before: default randn", lambda: torch.randn(8, device="cuda"))
    failed_capture()
    check("after: default randn", lambda: torch.randn(8, device="cuda"))
    check("after: default manual_seed", lambda: default.manual_seed(3))
    check("after: default set_offset", lambda: default.set_offset(default.get_offset() + 4))
    check("after: private randn", lambda: torch.randn(8, device="cuda", generator=private))
    check("after: private graph replay", graph.replay)
    private.manual_seed(5)
    graph.replay()
    a = made.clone()
    private.manual_seed(5)
    b = torch.randn(8, device="cuda", generator=private)
    print("replay equals eager draw:", bool(torch.equal(a, b)))
    check("after: default randn again", lambda: torch.randn(8, device="cuda"))
    check("reset: graphsafe_set_state(clone_state)", lambda: default.graphsafe_set_state(default.clone_state()))
    check("after reset: default randn", lambda: torch.randn(8, device="cuda"))
    print(torch.__version__, torch.cuda.get_device_name())


if __name__ == "__main__":
    main()
