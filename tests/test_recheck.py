"""The re-measurement of large speedups (CUDA-L1's safeguard), with real workers on the CPU: a program
whose speed does not repeat across fresh processes. Each load of the candidate reads the next mode from
a file, so the first, second and third measurements see different programs (all correct). File access
is statically banned, so these run the dynamic layer alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from cudal1.candidates import Candidate, Status
from cudal1.evaluator import EvalConfig
from cudal1.evaluator.batch import evaluate_many
from cudal1.evaluator.timing import agreeing_pair
from cudal1.problems import load_starter_suite

# diag(a) @ B: O(n^2) by broadcasting (fast), the reference's O(n^3) way (slow), or that way eight times
# (slower, about 1/8x). The programs that must stay apart are the two without a speedup: on a loaded CPU,
# waits for the core are added to every call and pull short calls' figures towards each other (a middle
# program at 8x came out [2.13, 5.18] beside the slow one's [0.93, 2.85] under CI's load), while the
# slower program's calls are long enough that those waits barely move its figure.
SHIFTING = '''import torch
import torch.nn as nn

with open({modes!r}) as f:
    _MODES = f.read().split()
with open({count!r}, "a+") as f:
    f.seek(0)
    _N = len(f.read())
    f.write("x")
MODE = _MODES[min(_N, len(_MODES) - 1)]


class ModelNew(nn.Module):
    def forward(self, a, B):
        if MODE == "fast":
            return a.unsqueeze(1) * B
        if MODE == "slow":
            return torch.diag(a) @ B
        out = torch.diag(a) @ B
        for _ in range(7):  # "slower": the reference's work eight times over
            out = torch.diag(a) @ B
        return out
'''


def _candidate(share: Path, modes: str) -> tuple[list, list[Candidate]]:
    problem = next(p for p in load_starter_suite() if p.name == "Diag_matmul")
    (share / "modes").write_text(modes)
    (share / "count").touch()
    for name in ("modes", "count"):
        (share / name).chmod(0o666)  # every worker runs as a fresh uid
    source = SHIFTING.format(modes=str(share / "modes"), count=str(share / "count"))
    return [problem], [Candidate(problem.problem_id, source, origin="test:shifting")]


# The re-check's rule with a 25% limit instead of the shared CPU's default 50%: the programs are 8-30x
# apart, so 25% still keeps two measurements of one program together (their intervals overlap) and
# tells the three programs apart under the full suite's load (three test workers on two cores).
CONFIG = EvalConfig(device="cpu", correctness_trials=2, timing_trials=3, static_checks=False, recheck_above=3.0,
                    recheck_tolerance=0.25)


@pytest.mark.slow
@pytest.mark.parametrize("modes", ["fast slow slow"])
def test_a_speedup_that_does_not_repeat_is_kept_at_its_slowest(shared_dir: Path, modes: str) -> None:
    problems, candidates = _candidate(shared_dir, modes)
    (result,) = evaluate_many(problems, candidates, CONFIG)
    speedups = result.extra["recheck_speedups"]
    assert len(speedups) == 3 and speedups[0] > 3.0, result  # the third measurement settled it
    assert result.status is Status.OK and "recheck_tiebreak" in result.flags, result
    assert result.speedup == min(speedups) and result.speedup < 2.0, result  # the slow program's figure


@pytest.mark.slow
def test_a_speedup_no_two_measurements_agree_on_is_rejected(shared_dir: Path) -> None:
    # Under the full suite's load the fast program's interval can widen until it reaches the slow one's
    # (the comment above SHIFTING): the evaluator then rightly keeps a pair that agrees. Such a run must
    # show the agreeing pair it kept; up to two fresh runs follow, and one of them must reject.
    kept = []
    for _attempt in range(3):
        (shared_dir / "count").write_text("")
        problems, candidates = _candidate(shared_dir, "fast slow slower")
        (result,) = evaluate_many(problems, candidates, CONFIG)
        if result.status is Status.REJECTED:
            break
        if "recheck_speedups" not in result.extra:  # the fast program read under the threshold: no re-check
            assert result.status is Status.OK and (result.speedup or 0) <= (CONFIG.recheck_above or 0), result
            kept.append(result.speedup)
            continue
        intervals = [(s, low, high) for s, (low, high) in zip(result.extra["recheck_speedups"],
                                                               result.extra["recheck_intervals"], strict=True)]
        assert result.status is Status.OK and agreeing_pair(intervals, CONFIG.recheck_limit), result
        kept.append(intervals)
    assert result.status is Status.REJECTED and "not reproduced" in result.reason, (result, kept)
    assert len(result.extra["recheck_speedups"]) == 3 and result.speedup is None
