"""The fork server imports torch.compile's machinery once, in its own environment; some of it fixes cache
paths at import. A worker forked from it must see only its own caches, as a worker started afresh does:
a path shared between workers is a channel between candidates."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path


def test_a_forked_worker_holds_no_cache_path_of_the_server(tmp_path: Path) -> None:
    server, child = tmp_path / "server", tmp_path / "child"
    server.mkdir()
    child.mkdir()  # tempfile takes TMPDIR only when it exists, as a worker's does
    script = textwrap.dedent(f"""
        import os, sys, types
        os.environ["TMPDIR"] = {str(server)!r}
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = {str(server / "inductor")!r}
        import tempfile
        from cudal1.evaluator import zygote
        zygote.warm()
        os.environ.clear()
        os.environ.update(TMPDIR={str(child)!r}, TORCHINDUCTOR_CACHE_DIR={str(child / "inductor")!r},
                          USER="cudal1-sandbox")
        tempfile.tempdir = None
        moved = zygote.own_caches()
        found = []
        for name, module in list(sys.modules.items()):
            if not name.startswith("torch") or not isinstance(module, types.ModuleType):
                continue
            for attr, value in list(vars(module).items()):
                if attr.startswith("__"):
                    continue  # where the module's own code and bytecode are
                for text in [value, *(vars(value).values() if hasattr(value, "__dict__") and
                                      not isinstance(value, (type, types.ModuleType, types.FunctionType)) else [])]:
                    if isinstance(text, str) and {str(server)!r} in text:
                        found.append(f"{{name}}.{{attr}}: {{text}}")
        import torch._dynamo.package as package, torch._inductor.codecache as codecache
        print(repr((found, package.DynamoCache.path_prefix(), codecache._HEADER_DIR, moved)))
    """)
    # Bytecode under the server's TMPDIR, as on the GPU hosts (benchmarks/gpu_setup.sh): a prefix match
    # must not move every module's __cached__.
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1],
                         env={**os.environ, "PYTHONPYCACHEPREFIX": str(server / "pyc")})
    found, dynamo_cache, header_dir, moved = eval(out.stdout.strip().splitlines()[-1])  # noqa: S307 - our own repr
    assert found == [] and "torch._dynamo.package.DynamoCache" in moved
    assert not [m for m in moved if m.endswith(("__file__", "__cached__"))]  # a bytecode prefix under /tmp stays
    assert dynamo_cache.startswith(str(child)) and header_dir.startswith(str(child))


def test_the_server_can_fork_workers_after_its_imports() -> None:
    """What serve() checks after the warm imports, on this machine's torch: no CUDA, no thread, a
    child that could use CUDA. (On the H100 host, importing torch.utils.cpp_extension or
    torch._inductor.compile_fx probed CUDA; they are not imported.)"""
    script = ("import sys, torch\nfrom cudal1.evaluator import zygote\nbefore = zygote.threads()\nzygote.warm()\n"
              "print(zygote.fork_unsafe(before), 'torch._dynamo' in sys.modules, 'torch.utils.cpp_extension' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.stdout.split() == ["None", "True", "False"]


def test_a_thread_makes_the_server_unsafe() -> None:
    script = ("import threading, time, torch\nfrom cudal1.evaluator import zygote\nbefore = zygote.threads()\n"
              "threading.Thread(target=time.sleep, args=(2,), daemon=True).start()\nprint(zygote.fork_unsafe(before))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.stdout.strip() == "1 threads started"
