"""Batch profiles (benchmarks/batch_profile.py's JSON) side by side: per release row and profile, the timed
calls, the command's wall against its timed calls, the wall per call outside the call, and the harness's own
kernels' device ms per batch (draws, staging copy, fingerprint sums, L2 flush).

    python benchmarks/profile_table.py before=a.json after=b.json [...] > table.md
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

# The harness's kernels by the names torch.profiler gives them (the flush is torch's fill of its buffer)
HARNESS = {"draws": "cudal1_draw", "staging copy": "cudal1_begin", "sums": "cudal1_sums",
           "L2 flush": "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>"}


def harness_ms(row: dict[str, Any]) -> dict[str, float]:
    kernels = row.get("kernels_ms_per_batch", {})
    return {name: round(sum(ms for k, ms in kernels.items() if k.startswith(prefix)), 2)
            for name, prefix in HARNESS.items()}


def table(profiles: dict[str, dict[str, Any]]) -> str:
    head = ["row", "profile", "calls", "command ms", "timed ms", "outside a call, µs per call", *HARNESS]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    rows = [r for r in next(iter(profiles.values())) if r != "device"]
    for row in rows:
        for label, profile in profiles.items():
            r = profile.get(row)
            if not isinstance(r, dict) or "calls" not in r:
                continue
            h = harness_ms(r)
            lines.append("| " + " | ".join([row, label, str(r["calls"]), f"{r['command_ms']:.1f}", f"{r['timed_ms']:.1f}",
                                           f"{r['per_call_outside_us']:.0f}", *(f"{h[k]:.2f}" for k in HARNESS)]) + " |")
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) < 2 or any("=" not in a for a in sys.argv[1:]):
        sys.exit("usage: profile_table.py LABEL=profile.json [LABEL=profile.json ...]")
    profiles = {a.split("=", 1)[0]: json.loads(Path(a.split("=", 1)[1]).read_text()) for a in sys.argv[1:]}
    print(table(profiles))


if __name__ == "__main__":
    main()
