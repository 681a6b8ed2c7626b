"""EvalConfig.pause_loads: a candidate's timing does not wait for the slow load of the one after it; that
load is stopped while the device times and goes on afterwards. Real workers on the CPU, a real batch."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from cudal1.candidates import Candidate, Status
from cudal1.evaluator import EvalConfig
from cudal1.evaluator.batch import evaluate_many
from cudal1.evaluator.builds import Quiet
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


class _Proc:
    """Stands for a WorkerProcess: what Quiet signals (a session leader's pid, no uid of its own)."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(["sleep", "60.517"], start_new_session=True)
        self.pid, self.uid = self.process.pid, None

    def stopped(self) -> bool:
        for _ in range(50):  # a signal is delivered asynchronously
            state = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            if state in "Tt":
                return True
            time.sleep(0.01)
        return False


def test_a_load_ahead_stops_only_while_its_own_device_times_and_a_build_while_any_does() -> None:
    """On two GPUs one device nearly always times: loads stopped by either device would hardly run."""
    quiet = Quiet()
    load0, load1, build = _Proc(), _Proc(), _Proc()
    try:
        with quiet.holding(load0, device="cuda:0"), quiet.holding(load1, device="cuda:1"), quiet.holding(build):
            assert not (load0.stopped() or load1.stopped() or build.stopped())
            with quiet("cuda:0"):
                assert load0.stopped() and build.stopped() and not load1.stopped()
                with quiet("cuda:1"):
                    assert load1.stopped()
                assert load1.stopped() is False and load0.stopped() and build.stopped()
            assert not (load0.stopped() or build.stopped())
            with quiet("cuda:1"):
                added = _Proc()  # a load that starts while its device times is stopped at once
                with quiet.holding(added, device="cuda:1"):
                    assert added.stopped()
                assert not added.stopped()  # let go when its load ends, though the device still times
                added.process.kill()
    finally:
        for p in (load0, load1, build):
            p.process.kill()
            p.process.wait()
