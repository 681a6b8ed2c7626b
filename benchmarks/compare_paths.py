"""Both output-comparison paths' time on a device: ms a comparison of a float32 output close to its
reference, each figure read on its own (``one_read=False``) against all at once, 50 comparisons after 5
warm-ups, each path twice, for three output sizes. One JSON line.

    PYTHONPATH=. python3 benchmarks/compare_paths.py > $OUT/cmp_time.json
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    import torch

    from cudal1.evaluator.compare import _compare_tensor
    from cudal1.evaluator.config import EvalConfig

    device = sys.argv[1] if len(sys.argv) > 1 else "cuda:0"
    config = EvalConfig(device=device)
    ms: dict[str, list[float]] = {}
    for n in (256 * 256, 1 << 20, 1 << 24):
        ref = torch.randn(n, device=device)
        out = ref + 1e-6
        for one_read in (True, False, True, False):
            for _ in range(5):
                _compare_tensor(ref, out, config, one_read=one_read)
            if ref.is_cuda:
                torch.cuda.synchronize()
            started = time.perf_counter()
            for _ in range(50):
                assert _compare_tensor(ref, out, config, one_read=one_read).ok
            ms.setdefault(f"{n} one_read={one_read}", []).append(round((time.perf_counter() - started) / 50 * 1e3, 4))
    name = torch.cuda.get_device_name(0) if device.startswith("cuda") else "cpu"
    print(json.dumps({"gpu": name, "ms": ms}))


if __name__ == "__main__":
    main()
