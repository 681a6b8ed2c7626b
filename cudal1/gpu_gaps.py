"""Why a reproduction row's speedup moved between two GPU kinds, from what its two rows recorded: the
verdicts and how close a pass came to its tolerance, a build that succeeded on one kind only, the two
kinds' memory bandwidths, the reference's own spread on each machine, and where the CUDA-graph baseline
was measured, how much of the reference's eager call is its device work at all. Pure: rows in, text out
(cudal1.reproduction makes the rows)."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from cudal1.evaluator.config import EDGE


def explain_gap(a: dict[str, Any], b: dict[str, Any], kind_a: str, kind_b: str, same_gpu: bool = False) -> str:
    """Why one row's speedup (vs eager) moved between two GPUs, from what the two rows recorded; with
    ``same_gpu``, between two runs on one GPU kind (two protocols), where no memory explains a move.

    >>> a = {"status": "ok", "vs_eager": 2.0, "vs_eager_low": 1.9, "vs_eager_high": 2.1, "reference_ms": 1.0,
    ...      "candidate_ms": 0.5, "flags": ""}
    >>> b = dict(a, vs_eager=1.4, vs_eager_low=1.35, vs_eager_high=1.45, reference_ms=0.7)
    >>> explain_gap(a, b, "H100", "H200")[:60]
    'the reference runs 1.43x faster on H200, the program 1.00x; '

    A gain beyond the two kinds' memory bandwidth ratio is not the memory's: a reference of a few small
    launches runs at the pace of the host that launches it, and the row's own spread on one machine says so.

    >>> b = dict(b, reference_ms=0.05, vs_eager=1.0, reference_ms_min=0.05, reference_ms_max=0.08, reference_timings=4)
    >>> print(explain_gap(dict(a, reference_ms=0.1), b, "H100", "H200").split("; ", 1)[1])
    the reference gains more than H200's memory (4.8 vs 3.35 TB/s) can give (1.43x): the rest is the host's, which paces the launches of its 0.1 ms on H100 (the kinds ran on different machines), or noise; the reference alone ranged 0.05-0.08 ms over the row's 4 evaluations on H200

    Slower on H200, which is H100's chip with faster memory, is not the GPU's doing:

    >>> slow = dict(a, reference_ms=1.25, vs_eager=2.5, vs_eager_low=2.4, vs_eager_high=2.6)
    >>> print(explain_gap(a, slow, "H100", "H200"))
    the reference runs 1.25x slower on H200, the program 1.00x; the reference slower on H200, whose chip is H100's with faster memory: not the GPU's doing; the host's pace (the kinds ran on different machines), or noise

    One kind under two protocols: what moved is the protocol's or the host's.

    >>> moved = dict(a, reference_ms=0.7, vs_eager=1.4, vs_eager_low=1.35, vs_eager_high=1.45)
    >>> print(explain_gap(a, moved, "H100 (c7efd958)", "H100 (5d2e0a11)", same_gpu=True))
    the reference runs 1.43x faster on H100 (5d2e0a11), the program 1.00x; one GPU kind measured both: the reference's move (1.43x faster) is the protocol's change or the host's pace (the runs were made apart)
    """
    if a["status"] != b["status"]:
        def side(row: dict[str, Any], kind: str) -> str:
            return f"{row['status']} on {kind}" + (f" ({row['reason'][:100]})" if row["reason"] else "")

        passed, kind = (a, kind_a) if a["status"] == "ok" else (b, kind_b)
        share = _share_of_failed_check(passed, (b if passed is a else a)["reason"])
        edge = (f"; the pass on {kind} used {share:.2f} of the allowance the other failed: a verdict at the edge "
                "of the tolerance, decided by the inputs drawn") if share is not None and share > EDGE else ""
        return f"verdict differs: {side(a, kind_a)}, {side(b, kind_b)}{edge}"
    built_a, built_b = "extension_build_failed" not in a["flags"], "extension_build_failed" not in b["flags"]
    if built_a != built_b:
        return (f"a build that differs: its extension built on {kind_a if built_a else kind_b} only; the other GPU "
                "ran the program's PyTorch fallback")
    notes = []
    ref = (a["reference_ms"] or 0.0) / max(b["reference_ms"] or 0.0, 1e-12)
    cand = (a["candidate_ms"] or 0.0) / max(b["candidate_ms"] or 0.0, 1e-12)
    if ref and cand:
        notes.append(f"the reference runs {_pace(ref, 'faster')} on {kind_b}, the program {_pace(cand)}")
        if frozenset((kind_a, kind_b)) in SAME_CHIP:
            slower = [who for who, gain in (("reference", ref), ("program", cand)) if gain < 1 / 1.15]
            if slower:  # nothing in the GPU makes it slower: the second kind is the first with faster memory
                notes.append(f"the {' and the '.join(slower)} slower on {kind_b}, whose chip is {kind_a}'s with "
                             "faster memory: not the GPU's doing; the host's pace (the kinds ran on different "
                             "machines), or noise")
        launches = _launches(a, b, kind_a, kind_b, ref, APART[same_gpu])
        if launches:
            notes.append(launches)
        notes += _one_kind(ref, cand) if same_gpu else _memory(a, kind_a, kind_b, ref, cand, bool(launches))
    for row, kind in ((a, kind_a), (b, kind_b)):
        low, high = row.get("reference_ms_min"), row.get("reference_ms_max")
        if low and high and high > low * 1.15:
            notes.append(f"the reference alone ranged {low:.3g}-{high:.3g} ms over the row's "
                         f"{row['reference_timings']} evaluations on {kind}")
    overlap = (a["vs_eager_low"] or 0.0) <= (b["vs_eager_high"] or 0.0) and (b["vs_eager_low"] or 0.0) <= (a["vs_eager_high"] or 0.0)
    if overlap:
        notes.append(f"noise: the 95% intervals [{a['vs_eager_low']:.2f}, {a['vs_eager_high']:.2f}] and "
                     f"[{b['vs_eager_low']:.2f}, {b['vs_eager_high']:.2f}] overlap")
    if "noisy" in a["flags"] or "noisy" in b["flags"]:
        notes.append("flagged noisy on " + " and ".join(k for k, r in ((kind_a, a), (kind_b, b)) if "noisy" in r["flags"]))
    return "; ".join(notes) or "unexplained by what was recorded"


def _one_kind(ref: float, cand: float) -> list[str]:
    """One kind under two protocols, no memory to weigh: the side that moved most (by more than 15%, and 15%
    more than the other), and what can move it."""
    moved = [(abs(math.log(gain)), who, gain) for who, gain, other in (("reference", ref, cand), ("program", cand, ref))
             if max(gain, 1 / gain) > 1.15 and max(gain / other, other / gain) > 1.15]
    return [f"one GPU kind measured both: the {who}'s move ({_pace(gain, 'faster')}) is the protocol's change or "
            f"the host's pace ({APART[True]})" for _, who, gain in sorted(moved)[-1:]]


def _memory(a: dict[str, Any], kind_a: str, kind_b: str, ref: float, cand: float, launches: bool) -> list[str]:
    """Between two kinds: a side that gained more than the other, weighed against the kinds' memories (a
    reference whose device work was measured on both kinds, ``launches``, needs no guess from memory)."""
    memory, ratio = _bandwidths(kind_a, kind_b)
    notes = []
    for who, gain, other, ms in (("reference", ref, cand, a["reference_ms"]), ("program", cand, ref, a["candidate_ms"])):
        if not (gain > 1.15 and gain > other * 1.15) or (who == "reference" and launches):
            continue
        if ratio is not None and gain > ratio * 1.1:  # beyond what the faster memory can give
            notes.append(f"the {who} gains more than {kind_b}'s memory{memory} can give ({ratio:.2f}x): the "
                         f"rest is the host's, which paces the launches of its {ms:.3g} ms on {kind_a} (the "
                         "kinds ran on different machines), or noise")
        elif who == "reference":
            notes.append(f"the reference gains more from {kind_b}'s memory{memory}: a memory-bound reference, "
                         "the program's time set by something else")
        else:
            notes.append(f"the program gains more from {kind_b}'s memory{memory} than the reference: a "
                         "memory-bound program beside a reference bound by compute or launches")
    return notes


# where the two rows were measured, as the reasons say it: two kinds are two hosts; one kind's two protocols
# were measured at different times, perhaps on different hosts of that kind
APART = {False: "the kinds ran on different machines", True: "the runs were made apart"}


def _launches(a: dict[str, Any], b: dict[str, Any], kind_a: str, kind_b: str, ref_gain: float,
              apart: str = APART[False]) -> str:
    """Where the CUDA-graph baseline was measured on both kinds (the reference's forward replayed as one
    graph: its device work, input copies included, without the host's launches) and the reference's eager
    time moved more than that work did: the rest of its move is in its launches, paced by the host. The
    recurrent references replay as a graph in a fifth of their eager time, and on one H100 their eager
    calls moved by 27-40% while the replays held within 1% (docs/gpu-runs.md at 88f971b, 2026-11-27-graph-levels), so
    a gain that looks like memory's can be the host's.

    >>> a = {"reference_ms": 71.6, "cuda_graph_ms": 8.62}
    >>> print(_launches(a, {"reference_ms": 45.8, "cuda_graph_ms": 8.46}, "H100", "H200", 71.6 / 45.8))
    its forward replayed as one CUDA graph (the cuda_graph baseline) took 8.62 ms on H100 and 8.46 ms on H200 (1.02x), 12% and 18% of its eager call: the rest of the reference's move is its launches, the host's pace (the kinds ran on different machines)
    >>> _launches(a, {"reference_ms": 50.0, "cuda_graph_ms": 6.0}, "H100", "H200", 71.6 / 50.0)  # moved with it
    ''
    """
    ga, gb, ra, rb = a.get("cuda_graph_ms"), b.get("cuda_graph_ms"), a.get("reference_ms"), b.get("reference_ms")
    if not (ga and gb and ra and rb):
        return ""
    device = ga / gb
    if max(ref_gain, 1 / ref_gain) <= 1.15 or max(ref_gain / device, device / ref_gain) <= 1.15:
        return ""
    return (f"its forward replayed as one CUDA graph (the cuda_graph baseline) took {ga:.3g} ms on {kind_a} and "
            f"{gb:.3g} ms on {kind_b} ({_pace(device)}), {ga / ra:.0%} and {gb / rb:.0%} of its eager call: the rest "
            f"of the reference's move is its launches, the host's pace ({apart})")


def _share_of_failed_check(passed: dict[str, Any], reason: str) -> float | None:
    """The share of the check the other side failed (its reason names it) that the pass used.

    >>> _share_of_failed_check({"max_rel_l2_error": 0.0095}, "output 0: relative L2 error 0.0101 exceeds 0.01 (...)")
    0.95
    >>> _share_of_failed_check({"max_scaled_error": 0.0077}, "3 of 262144 elements outside atol=0.01 rtol=0.01 (...)")
    0.77
    """
    l2 = re.search(r"relative L2 error \S+ exceeds ([0-9.e-]+)", reason)
    if l2 and passed.get("max_rel_l2_error") is not None:
        return round(passed["max_rel_l2_error"] / float(l2.group(1)), 4)
    tol = re.search(r"outside atol=([0-9.e-]+) rtol=([0-9.e-]+)", reason)
    if tol and tol.group(1) == tol.group(2) and passed.get("max_scaled_error") is not None:
        return round(passed["max_scaled_error"] / float(tol.group(1)), 4)  # |d| / (t (1 + |ref|)), atol = rtol = t
    return None


def _pace(gain: float, word: str = "") -> str:
    """A time ratio as read: 1.43 -> '1.43x faster' (or '1.43x'), 0.8 -> '1.25x slower'."""
    if gain >= 1:
        return f"{gain:.2f}x" + (f" {word}" if word else "")
    return f"{1 / gain:.2f}x slower"


# Kinds that are one chip at the same clocks, told apart by their memory alone (H200: GH100 with 141 GB
# of HBM3e): a program cannot run slower on the one with the faster memory for a reason of the GPU's own.
SAME_CHIP = {frozenset(("H100", "H200"))}

# Peak memory bandwidth, TB/s, of the GPU kinds the cross-GPU pools name (vendors' data sheets; the SXM
# parts, A100 80GB): why a memory-bound program moves between two kinds.
BANDWIDTH_TBS = {"H100": 3.35, "H200": 4.8, "H20": 4.0, "A100": 2.04, "L40": 0.864, "3090": 0.936}


def _bandwidths(kind_a: str, kind_b: str) -> tuple[str, float | None]:
    """Both kinds' bandwidths, second first, and the second's over the first's, where both are known:
    (" (4.8 vs 3.35 TB/s)", 1.43); else ("", None)."""
    a, b = BANDWIDTH_TBS.get(kind_a), BANDWIDTH_TBS.get(kind_b)
    return (f" ({b:g} vs {a:g} TB/s)", b / a) if a and b else ("", None)


def gaps(rows_a: Sequence[dict[str, Any]], rows_b: Sequence[dict[str, Any]], kind_a: str, kind_b: str,
         limit: float = 0.25, same_gpu: bool = False) -> list[dict[str, Any]]:
    """The rows whose speedup vs eager differs by more than ``limit`` (relative to the smaller) between two
    GPUs (or, ``same_gpu``, two runs on one kind), or whose verdict differs, each with a reason."""
    by_id = {r["problem_id"]: r for r in rows_b}
    out = []
    for a in rows_a:
        b = by_id.get(a["problem_id"])
        if b is None or "no_program" in (a["status"], b["status"]) or "not_run" in (a["status"], b["status"]):
            continue
        sa, sb = a["vs_eager"], b["vs_eager"]
        moved = (sa is not None and sb is not None and abs(sa - sb) / max(min(sa, sb), 1e-12) > limit)
        if moved or a["status"] != b["status"]:
            out.append({"problem_id": a["problem_id"], kind_a: sa, kind_b: sb,
                        "reason": explain_gap(a, b, kind_a, kind_b, same_gpu)})
    return out
