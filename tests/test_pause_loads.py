"""EvalConfig.pause_loads: a candidate's timing does not wait for the slow load of the one after it; that
load is stopped while the device times and goes on afterwards. Real workers on the CPU, a real batch."""

from __future__ import annotations

import pytest

from cudal1.candidates import Candidate, Status
from cudal1.evaluator import EvalConfig
from cudal1.evaluator.batch import evaluate_many
from cudal1.problems import load_starter_suite

# The second problem's candidate takes 4 s to import: its load runs ahead while the first one is checked
SLOW_IMPORT = "import time\ntime.sleep(4.0)\n"
CONFIG = EvalConfig(device="cpu", correctness_trials=2, timing_trials=3, target_trial_ms=5.0, remeasure=0,
                    recheck_above=None, static_checks=False)


@pytest.mark.parametrize("pause", [False, True])
def test_timing_waits_for_a_slow_load_ahead_only_without_pause(pause: bool) -> None:
    first, second = load_starter_suite()[:2]
    candidates = [Candidate(first.problem_id, first.source.replace("class Model", "class ModelNew")),
                  Candidate(second.problem_id, SLOW_IMPORT + second.source.replace("class Model", "class ModelNew"))]
    config = EvalConfig(**{**CONFIG.to_dict(), "pause_loads": pause})
    results = {e.problem_id: e for e in evaluate_many([first, second], candidates, config, ahead=1)}
    assert all(e.status is Status.OK for e in results.values()), [e.reason for e in results.values()]
    waited = results[first.problem_id].extra["wait_s"]
    if pause:
        assert waited < 1.0, results[first.problem_id].extra  # timed beside the stopped load
    else:
        assert waited >= 2.0, results[first.problem_id].extra  # the import's 4 s, less the first one's checks
    # the slow candidate itself loaded whole and was measured either way
    assert results[second.problem_id].speedup is not None
    assert config.hash == CONFIG.hash  # how loads wait is not part of what is measured

