"""EvalConfig.fast_core: before each timed call a GPU's timed worker moves to a core at the host's fast
pace (cores.CoreHop). The moves on scripted readings, a real move on this machine, and the option's
place in the configuration."""

from __future__ import annotations

import os
import threading
from dataclasses import replace

from cudal1.evaluator import EvalConfig, identity
from cudal1.evaluator.cores import CoreHop, hop_cores, set_affinity


class Host:
    """Each core's readings in turn (ms), and where the worker is."""

    def __init__(self, readings: dict[int, list[float]]) -> None:
        self.readings, self.core, self.moves = readings, -1, []

    def move(self, core: int) -> None:
        self.core = core
        self.moves.append(core)

    def probe(self) -> float:
        return self.readings[self.core].pop(0)


def test_a_slow_core_is_left_for_the_next_within_the_moves_allowed() -> None:
    # the first call reads every core once: core 6 is the fastest (0.010), so the worker starts there
    host = Host({7: [0.016, 0.010, 0.020], 6: [0.010, 0.010, 0.016, 0.020], 5: [0.012, 0.017]})
    hop = CoreHop([7, 6, 5], host.probe, host.move)
    assert hop.before_call(2) == 0.010 and hop.floor == 0.010 and host.moves == [7, 6, 5, 6]
    # core 6 now slow: on to 5 (slow too), then 7 (fast): two moves, the call runs on 7
    assert hop.before_call(2) == 0.010 and host.core == 7 and host.moves[-2:] == [5, 7]
    # at most `hops` moves: with one allowed, a slow core and a slow next core stay slow
    assert hop.before_call(1) == 0.020 and host.core == 6
    hop.home()
    assert host.core == 7 and hop.at == 0


def test_each_batch_starts_on_the_fastest_core_and_the_floor_only_falls() -> None:
    host = Host({1: [0.010, 0.020], 2: [0.016, 0.012]})
    hop = CoreHop([1, 2], host.probe, host.move)
    hop.start()
    assert hop.floor == 0.010 and host.core == 1 and hop.hops == 2
    hop.start()  # the next batch: core 1 slow now, core 2 the fastest; the floor stays the host's
    assert hop.floor == 0.010 and host.core == 2 and hop.at == 1 and hop.hops == 4


def test_a_fast_core_is_kept() -> None:
    host = Host({3: [0.010, 0.0105, 0.0102], 2: [0.011]})
    hop = CoreHop([3, 2], host.probe, host.move)
    hop.before_call(1)
    assert hop.before_call(1) == 0.0102 and host.core == 3 and host.moves == [3, 2, 3]


def test_settle_discards_the_first_reading_after_a_move() -> None:
    # core 5 reads slow right after the move (its caches cold), fast once settled: with settle the worker
    # stays there; without, the cold reading sends it on to 4
    readings = {6: [0.010, 0.020], 5: [0.011, 0.030, 0.010], 4: [0.012, 0.011]}
    host = Host({c: list(r) for c, r in readings.items()})
    hop = CoreHop([6, 5, 4], host.probe, host.move, settle=True)
    # start: 6 the fastest; then 6 reads slow (0.020), so on to 5, whose cold 0.030 is discarded
    assert hop.before_call(2) == 0.010 and host.core == 5 and host.readings[5] == []
    host = Host({c: list(r) for c, r in readings.items()})
    hop = CoreHop([6, 5, 4], host.probe, host.move)
    assert hop.before_call(2) == 0.011 and host.core == 4  # 5's cold reading sent it on


def test_a_real_move_on_this_machine_and_home_again() -> None:
    allowed = sorted(os.sched_getaffinity(0))
    seen: list[set[int]] = []

    def timed_thread() -> None:  # set_affinity moves the calling thread: a thread of its own, as in a worker
        readings = iter([1.0] + [0.5] * (len(allowed) - 1) + [0.5, 2.0, 0.5])
        hop = CoreHop(allowed, lambda: next(readings))
        hop.before_call(1)
        seen.append(os.sched_getaffinity(0))
        hop.before_call(1)
        seen.append(os.sched_getaffinity(0))
        hop.home()
        seen.append(os.sched_getaffinity(0))
        set_affinity(set(allowed))

    t = threading.Thread(target=timed_thread)
    t.start()
    t.join()
    if len(allowed) > 1:
        # the first call: every core read once, the first fast one kept; the second: slow, so one move on
        assert seen[0] == {allowed[1]} and seen[1] == {allowed[2 % len(allowed)]} and seen[2] == {allowed[0]}


def test_no_hops_on_a_cpu_device_or_a_host_too_small_to_split() -> None:
    assert hop_cores("cpu", 0) == []
    if len(os.sched_getaffinity(0)) < 4:
        assert hop_cores("cuda:0", 1) == []


def test_fast_core_is_part_of_the_measurement_and_guarded() -> None:
    assert EvalConfig().fast_core == 0
    assert EvalConfig().hash != replace(EvalConfig(), fast_core=3).hash
    names = identity.harness_code()
    assert names["CoreHop.before_call"] is CoreHop.before_call and names["CoreHop.home"] is CoreHop.home
    assert names["CoreHop.start"] is CoreHop.start


def test_a_program_cannot_move_itself_or_reach_the_harness_moves() -> None:
    from cudal1.evaluator.static import screen
    base = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
    # onto a core of its choosing, directly or through the harness's object found among the interpreter's
    moves = ["import os\nos.sched_setaffinity(0, {3})\n",
             "import gc\nhop = [o for o in gc.get_objects() if type(o).__name__ == 'CoreHop']\n",
             "import sys\nsys.modules['cudal1.evaluator.cores'].CoreHop.before_call = lambda self, hops: 0.0\n"]
    assert screen(base) == (False, ())
    for move in moves:
        rejected, _ = screen(move + base)
        assert rejected, move
