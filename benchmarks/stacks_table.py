"""One line per release run from its summary.json (``release_eval.py --stacks``): the wall, the phases the
rows summed, and the share of the device loop's stack samples in each of a few places: closing workers,
reading /proc for the stray check, waiting to time (schedule.quiet_after), and waiting for a worker's reply.

    python benchmarks/stacks_table.py docs/benchmarks/parent-stacks-h200/ab/ab*-*
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

# where a device loop's sample was, by a part of its chain of the project's frames (parent_load.stack_key)
PLACES = {"closing": ("close",), "stray_scan": ("stray_processes",), "quiet": ("schedule.py:quiet",),
          "replies": ("_read_reply",)}
PHASES = ("eval_s", "timing_s", "wait_s", "correctness_s", "tuned_first_call_s", "row_beyond_kept_s")


def shares(chains: dict[str, float]) -> dict[str, float]:
    """Each place's share of the samples (a chain counts for the first place it names).

    >>> shares({"core.py:evaluate_candidate > process.py:close > forking.py:wait": 0.1, "a > b": 0.9})["closing"]
    0.1
    """
    out = dict.fromkeys(PLACES, 0.0)
    for chain, share in chains.items():
        for place, parts in PLACES.items():
            if any(p in chain for p in parts):
                out[place] += share
                break
    return {k: round(v, 4) for k, v in out.items()}


def line(run: Path) -> dict[str, Any]:
    summary = json.loads((run / "summary.json").read_text())
    split = summary["time_split_s"]
    parent = summary.get("parent", {})
    row: dict[str, Any] = {"run": run.name, "wall_s": summary["wall_s"]}
    row |= {k: split.get(k) for k in PHASES}
    row["wall_less_rechecks_s"] = round(summary["wall_s"] - (split.get("row_beyond_kept_s") or 0.0), 1)
    if "stacks" in parent:
        row |= shares(parent["stacks"]["chains"])
    if "host_processes" in parent:
        row["processes"] = parent["host_processes"]["median"]
        row["scan_ms"] = parent["host_processes"]["scan_ms_median"]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path)
    args = ap.parse_args()
    rows = [line(r) for r in args.runs]
    keys = list(rows[0])
    print(" | ".join(keys))
    for r in rows:
        print(" | ".join(str(r.get(k)) for k in keys))


if __name__ == "__main__":
    main()
