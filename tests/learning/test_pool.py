"""Score buckets and exemplar sampling statistics."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest

from cudal1.pool import CandidatePool, PoolEntry, bucket_of, bucket_probabilities


def entry(i: int, speedup: float | None, status: str = "ok", pid: str = "p") -> PoolEntry:
    return PoolEntry(pid, f"c{i}", f"{i:064x}", f"# program {i}\n", "test", status, speedup)


def test_probabilities_follow_the_softmax_of_bucket_means():
    entries = [entry(0, 1.0), entry(1, 1.02), entry(2, 1.5), entry(3, 2.05), entry(4, None, "incorrect")]
    probs = bucket_probabilities(entries, width=0.25, temperature=0.5)
    assert set(probs) == {4, 6, 8}  # failures have no bucket
    mu = (1.0 + 1.02 + 1.5 + 2.05) / 4
    expected = {4: math.exp((1.01 - mu) / 0.5), 6: math.exp((1.5 - mu) / 0.5), 8: math.exp((2.05 - mu) / 0.5)}
    total = sum(expected.values())
    for b, p in probs.items():
        assert p == pytest.approx(expected[b] / total)


def test_buckets_are_drawn_with_those_probabilities():
    # Three buckets with one program each: the first exemplar's bucket follows P(bucket) exactly.
    pool = CandidatePool([entry(0, 1.0), entry(1, 1.5), entry(2, 2.0)])
    probs = bucket_probabilities(pool.successes("p"), 0.25, 0.5)
    rng = random.Random(0)
    draws = 20000
    first = Counter()
    for _ in range(draws):
        # n=1: one draw of the bucket distribution
        first[bucket_of(pool.sample_exemplars("p", rng, n=1, width=0.25, temperature=0.5)[0].speedup, 0.25)] += 1
    for b, p in probs.items():
        assert first[b] / draws == pytest.approx(p, abs=0.015)


def test_two_exemplars_come_from_different_buckets_and_uniformly_within():
    pool = CandidatePool([entry(0, 1.0), entry(1, 1.01), entry(2, 1.02), entry(3, 1.6)])
    rng = random.Random(1)
    within = Counter()
    for _ in range(6000):
        pair = pool.sample_exemplars("p", rng, n=2, width=0.25, temperature=0.5)
        assert len({bucket_of(e.speedup, 0.25) for e in pair}) == 2
        assert pair[0].speedup <= pair[1].speedup  # slowest first
        within[pair[0].speedup] += 1
    for speedup in (1.0, 1.01, 1.02):  # uniform inside bucket 4
        assert within[speedup] / 6000 == pytest.approx(1 / 3, abs=0.03)


def test_a_bucket_far_ahead_leaves_the_next_draw_possible():
    # On the GPU a release program measured 528x beside rewrites at ~1x: the others' first-draw probabilities
    # underflow to 0, and the second exemplar must still come from the buckets left, the faster one likelier.
    pool = CandidatePool([entry(0, 528.4), entry(1, 0.95), entry(2, 0.49), entry(3, 0.99)])
    rng = random.Random(0)
    seconds = Counter()
    for _ in range(2000):
        pair = pool.sample_exemplars("p", rng, n=2, width=0.1, temperature=0.5)
        assert pair[-1].speedup == 528.4 and len(pair) == 2
        seconds[bucket_of(pair[0].speedup, 0.1)] += 1
    # conditional on the 528x bucket drawn first: P(next bucket) from the remaining buckets' own softmax
    rest = bucket_probabilities([entry(1, 0.95), entry(2, 0.49), entry(3, 0.99)], 0.1, 0.5)
    for b, p in rest.items():
        assert seconds[b] / 2000 == pytest.approx(p, abs=0.04)


def test_fewer_buckets_than_exemplars_fill_from_the_rest():
    pool = CandidatePool([entry(0, 1.0), entry(1, 1.05)])  # one bucket of width 0.25
    pair = pool.sample_exemplars("p", random.Random(0), n=2, width=0.25)
    assert sorted(e.speedup for e in pair) == [1.0, 1.05]
    assert CandidatePool().sample_exemplars("p", random.Random(0)) == []


def test_sampling_is_deterministic_under_a_seed():
    pool = CandidatePool([entry(i, 0.8 + 0.1 * i) for i in range(10)])
    draw = [pool.sample_exemplars("p", random.Random(7), n=2) for _ in range(3)]
    assert draw[0] == draw[1] == draw[2]


def test_save_load_round_trip(tmp_path):
    pool = CandidatePool([entry(0, 1.0), entry(1, None, "compile_error"), entry(2, 1.3, pid="q")])
    pool.save(tmp_path / "pool.parquet")
    again = CandidatePool.load(tmp_path / "pool.parquet")
    assert again.entries() == pool.entries()
    assert len(CandidatePool.load(tmp_path / "missing.parquet")) == 0


def test_first_measurement_stands():
    pool = CandidatePool([entry(0, 1.0)])
    assert not pool.add(entry(0, 9.0))
    assert pool.get("p", f"{0:064x}").speedup == 1.0


def test_admission_rules():
    pool = CandidatePool([entry(0, 1.0), entry(1, 1.2)])
    assert pool.admits("p", 0.9, "all") and pool.admits("p", 1.3, "improving")
    assert not pool.admits("p", 1.1, "improving") and not pool.admits("p", None, "all")
    with pytest.raises(ValueError, match="improving"):
        pool.admits("p", 1.0, "some")


def test_improving_admission_needs_the_margin():
    # Best exemplar 1.2: with a 15% margin a program must measure above 1.38 to be shown in later prompts,
    # so a near-copy that timed faster by noise does not replace the exemplars the policy was trained on.
    pool = CandidatePool([entry(0, 1.0), entry(1, 1.2)])
    assert pool.admits("p", 1.3, "improving", margin=0.0)
    assert not pool.admits("p", 1.3, "improving", margin=0.15)
    assert pool.admits("p", 1.4, "improving", margin=0.15)
    assert pool.admits("p", 0.5, "all", margin=0.15)  # the margin only concerns "improving"
    assert pool.admits("q", 0.5, "improving", margin=0.15)  # a problem's first correct program always


def test_only_exemplars_are_shown():
    from dataclasses import replace

    pool = CandidatePool([entry(0, 1.0), replace(entry(1, 3.0), exemplar=False)])
    shown = {e.speedup for _ in range(50) for e in pool.sample_exemplars("p", random.Random(_), n=2)}
    assert shown == {1.0}
