"""release_bench.py reads a run's wall from release_eval.py's summary only where the summary timed the
whole run: a second invocation on the same folder resumes it, and its summary times itself alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scripts import load_script

from cudal1.candidates import load_evaluations


def _run(tmp_path: Path, **summary: object) -> Path:
    run = tmp_path / "run1"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps({"rows": 35, "evaluations": 35, "wall_s": 120.4} | summary))
    return run


def test_a_summary_of_the_whole_run_gives_its_rate(tmp_path: Path) -> None:
    bench = load_script("release_bench")
    run = _run(tmp_path, evaluated_here=35)
    assert bench.rate(run) == pytest.approx(35 / 120.4)


def test_a_summary_from_before_the_count_was_kept_is_read_as_before(tmp_path: Path) -> None:
    bench = load_script("release_bench")  # the committed runs under docs/benchmarks have no evaluated_here
    assert bench.run_summary(_run(tmp_path))["wall_s"] == 120.4


def test_a_summary_written_by_a_resume_is_refused(tmp_path: Path) -> None:
    bench = load_script("release_bench")
    run = _run(tmp_path, evaluated_here=0, wall_s=0.2)  # what overwrote a 119 s run's summary on the H100
    with pytest.raises(SystemExit, match="resumed this folder .0 of 35 evaluations."):
        bench.rate(run)


def test_repeated_pairs_give_the_median_ratio_and_list_every_pair(tmp_path: Path) -> None:
    """The committed runs of 2026-11-27: the same 53 rows, three one-GPU/two-GPU pairs on one host."""
    bench = load_script("release_bench")
    runs = Path(__file__).resolve().parents[1] / "docs" / "benchmarks" / "two-gpu-h100"
    ones = [runs / f"{p}-warm-one-gpu" for p in "npq"]
    twos = [runs / f"{p}-warm-two-gpu" for p in "npq"]
    figures = bench.update_two_gpu({}, ones, twos, "cmd", "2026-11-27", "warm")
    pairs = figures["details"]["two_gpu"]["pairs"]
    assert [p["speedup"] for p in pairs] == [round(bench.rate(t) / bench.rate(o), 3) for o, t in zip(ones, twos)]
    assert figures["two_gpu_speedup"] == sorted(p["speedup"] for p in pairs)[1]
    assert figures["details"]["two_gpu"]["programs"] == 53
    with pytest.raises(SystemExit, match="in pairs"):
        bench.update_two_gpu({}, ones, twos[:2], "cmd", "2026-11-27")
    fewer = tmp_path / "one-row-fewer"
    fewer.mkdir()
    (fewer / "summary.json").write_text((ones[1] / "summary.json").read_text())
    (fewer / "results.jsonl").write_text("".join((ones[1] / "results.jsonl").read_text().splitlines(True)[1:]))
    with pytest.raises(SystemExit, match="different rows"):
        bench.update_two_gpu({}, [ones[0], fewer], twos[:2], "cmd", "2026-11-27")


def test_a_run_that_built_programs_is_not_recorded_as_warm() -> None:
    """The cold run of the whole release on two H100s (2026-11-27) was meant to be warm; a new run folder
    had emptied the build cache. Given as a warm pair, it is refused, naming the rows it built."""
    bench = load_script("release_bench")
    runs = Path(__file__).resolve().parents[1] / "docs" / "benchmarks" / "two-gpu-h100"
    cold = runs / "r-cold-two-gpu"
    built = bench.built_here(bench.load_evaluations(cold / "results.jsonl"))
    assert len(built) > 50 and "L2-34" in built
    assert bench.built_here(bench.load_evaluations(runs / "q-warm-two-gpu" / "results.jsonl")) == []
    with pytest.raises(SystemExit, match="was not warm"):
        bench.update_two_gpu({}, [runs / "q-warm-one-gpu"], [cold], "cmd", "2026-11-27", "warm")


def test_each_pair_says_how_much_more_device_time_its_rows_took_on_two_gpus() -> None:
    """The whole release on one H100 against both of a 2x H100 host (2026-11-27): balanced devices, and rows
    that took 8-10% more of the devices' time on two GPUs than on one, which held the ratio under 1.8x."""
    bench = load_script("release_bench")
    runs = Path(__file__).resolve().parents[1] / "docs" / "benchmarks" / "two-gpu-h100"
    one = runs / "w-warm-one-gpu"
    figures = bench.update_two_gpu({}, [one, one], [runs / "w-warm-two-gpu", runs / "w-warm-two-gpu-2"], "cmd",
                                   "2026-11-27", "warm")
    pairs = figures["details"]["two_gpu"]["pairs"]
    assert [p["one_gpu_rows_s"] for p in pairs] == [481.6, 481.6]
    assert [p["two_gpu_rows_s"] for p in pairs] == [529.7, 519.7]
    assert [p["rows_s_two_over_one"] for p in pairs] == [1.1, 1.079]
    assert figures["two_gpu_speedup"] == 1.797


def test_a_single_pair_records_its_rows_time_on_two_gpus_against_one() -> None:
    """A quarter of the release on one 2x H200 host (2026-11-28, a load's preparation on the spare cores):
    1.901x, the rows summed over both devices 0.98x of one GPU's (128.3 s against 130.9 s)."""
    bench = load_script("release_bench")
    runs = Path(__file__).resolve().parents[1] / "docs" / "benchmarks" / "two-gpu-spare-prep-h200" / "quarter"
    figures = bench.update_two_gpu({}, [runs / "one1"], [runs / "two1"], "cmd", "2026-11-28", "warm")
    two = figures["details"]["two_gpu"]
    assert figures["two_gpu_speedup"] == 1.901
    assert (two["one_gpu_wall_s"], two["two_gpu_wall_s"], two["rows_s_two_over_one"]) == (142.8, 75.1, 0.98)
    assert "pairs" not in two and two["programs"] == 53 and two["gpu"] == "NVIDIA H200"


def test_the_time_split_shows_the_first_calls_alone_and_the_rechecks() -> None:
    """A committed warm arm of 2026-11-27 (tune_alone on, a quarter of the release): its self-tuning
    programs' first calls made alone, and the re-checks' other measurements, each get their own line."""
    from cudal1.candidates import load_evaluations

    evaluations = load_evaluations(Path("docs/benchmarks/tune-alone-h100/quarter/atune-2/results.jsonl"))
    split = load_script("release_eval").time_split(evaluations)
    assert split["tuned_first_call_s"] == pytest.approx(11.0, abs=0.05)
    assert split["row_beyond_kept_s"] == pytest.approx(29.5, abs=0.1)
    assert split["tuned_first_call_s"] < split["load_s"]  # a part of the load phase


def test_the_time_split_shows_the_programs_imports_inside_the_workers_load() -> None:
    """The cold H200 run of 2026-11-28 (docs/gpu-runs.md#2026-11-28-cold-h200): the candidate workers' loads
    before construction summed 92.3 s, the programs' own imports 2.1 s of it; runs from before the import
    was recorded count none."""
    from cudal1.candidates import load_evaluations

    split = load_script("release_eval").time_split(load_evaluations(Path("docs/benchmarks/cold-h200/results.jsonl")))
    assert split["build_s"] == pytest.approx(92.3, abs=0.05) and split["import_s"] == pytest.approx(2.1, abs=0.05)
    older = load_script("release_eval").time_split(
        load_evaluations(Path("docs/benchmarks/tune-alone-h100/quarter/atune-2/results.jsonl")))
    assert older["import_s"] == 0.0


def test_the_time_split_shows_the_loads_work_beside_what_it_can_hide_behind() -> None:
    """A warm arm of the spare-prep sample (docs/gpu-runs.md#2026-11-28-spare-prep): the loads ahead did
    13.0 s of load commands and 12.1 s of first calls, beside 4.7 s of correctness trials, and the device
    waited 16.4 s for them."""
    from cudal1.candidates import load_evaluations

    split = load_script("release_eval").time_split(
        load_evaluations(Path("docs/benchmarks/spare-prep-h200/aon-0/results.jsonl")))
    assert split["load_cmd_s"] == pytest.approx(13.0, abs=0.05) and split["first_call_s"] == pytest.approx(12.1, abs=0.05)
    assert split["correctness_s"] == pytest.approx(4.7, abs=0.05) and split["wait_s"] == pytest.approx(16.4, abs=0.05)
    assert split["load_cmd_s"] + split["first_call_s"] - split["correctness_s"] > split["wait_s"]


# the whole release on one GPU and on both of 2x H200 hosts (docs/gpu-runs.md#2026-11-28-two-gpu-whole, #2026-11-28-split)
WHOLE = Path(__file__).resolve().parents[1] / "docs" / "benchmarks" / "two-gpu-whole-h200"


def test_the_whole_release_pair_on_one_h200_host_is_recorded_as_measured() -> None:
    """The whole release (210 programs) on one 2x H200 host (2026-11-28): one GPU 516.5 s over two calls,
    both GPUs 306.8 s, 1.684x; the rows summed over both devices took 1.20x one GPU's."""
    bench = load_script("release_bench")
    figures = bench.update_two_gpu({}, [WHOLE / "one"], [WHOLE / "two"], "cmd", "2026-11-28", "warm")
    two = figures["details"]["two_gpu"]
    assert figures["two_gpu_speedup"] == 1.684 and abs(516.5 / 306.8 - 1.684) < 1e-3
    assert (two["one_gpu_wall_s"], two["two_gpu_wall_s"], two["rows_s_two_over_one"]) == (516.5, 306.8, 1.199)
    assert two["host_pace_two_over_one"] == 1.146  # the host ran slower in the two-GPU run
    assert two["programs"] == 210 and bench.run_summary(WHOLE / "one")["calls"] == 2


def test_one_process_per_gpu_sums_the_rows_as_one_process_does_and_the_host_is_what_slows() -> None:
    """docs/gpu-runs.md#2026-11-28-split: one evaluating process per GPU (325.0 s) summed its rows as the
    one-process two-GPU run did (547.5 against 557.5 s), at the same host pace; both read the host's own pace
    11-15% slower than the one-GPU run, which another host's one-GPU run matched to 2%."""
    phases = load_script("pool_phases")
    bench = load_script("release_bench")

    def paired(a: str, b: str) -> dict:
        return phases.paired(load_evaluations(WHOLE / a / "results.jsonl"), load_evaluations(WHOLE / b / "results.jsonl"))

    split_two, split_one, two_one, other_one = (paired("split-host3", "two"), paired("split-host3", "one"),
                                                paired("two", "one"), paired("one-partial-host4", "one"))
    assert split_two["ratios"]["host_pace_ms"] == 1.001 and split_two["verdict_changes"] == 0
    assert (split_one["ratios"]["host_pace_ms"], two_one["ratios"]["host_pace_ms"]) == (1.108, 1.146)
    assert other_one["ratios"]["host_pace_ms"] == 1.019 and other_one["both_ok"] == 102
    split, two = bench.run_summary(WHOLE / "split-host3"), bench.run_summary(WHOLE / "two")
    assert (split["wall_s"], two["wall_s"]) == (325.0, 306.8)
    rows = {name: bench.rows_time(load_evaluations(WHOLE / name / "results.jsonl")) for name in ("split-host3", "two", "one")}
    assert (round(rows["split-host3"], 1), round(rows["two"], 1), round(rows["one"], 1)) == (547.5, 557.5, 465.0)


# the whole release on one GPU and on both of one 2x H200 host, 2026-11-29 (docs/gpu-runs.md#2026-11-29-two-gpu-release)
X2 = Path(__file__).resolve().parents[1] / "docs" / "benchmarks" / "two-gpu-x2-h200"


def test_the_whole_release_on_two_h200s_is_recorded_as_measured_with_the_hosts_pace_beside_it() -> None:
    """One GPU 664.3 s over two calls, both GPUs 359.2 s and 340.1 s: 1.849x and 1.953x, median 1.901x; no
    verdict changed over the three runs; the host's own pace read 3% and 9% faster in the two-GPU runs than in
    the one-GPU run, which is part of the margin over 1.8x (the 2026-11-28 host read 15% slower on two)."""
    bench = load_script("release_bench")
    figures = bench.update_two_gpu({}, [X2 / "one", X2 / "one"], [X2 / "two", X2 / "two2"], "cmd", "2026-11-29", "warm")
    pairs = figures["details"]["two_gpu"]["pairs"]
    assert [p["speedup"] for p in pairs] == [1.849, 1.953] and figures["two_gpu_speedup"] == 1.901
    assert [p["rows_s_two_over_one"] for p in pairs] == [1.07, 1.018]
    assert bench.run_summary(X2 / "one")["calls"] == 2 and figures["details"]["two_gpu"]["programs"] == 210
    runs = {name: load_evaluations(X2 / name / "results.jsonl") for name in ("one", "two", "two2")}
    for two in ("two", "two2"):
        assert bench.agreement({e.problem_id: e for e in runs["one"]}, {e.problem_id: e for e in runs[two]})["flips"] == []
    assert [p["host_pace_two_over_one"] for p in pairs] == [0.973, 0.91]


# the whole release cold then warm on one H200, 2026-11-29 (docs/gpu-runs.md#2026-11-29-one-host-release)
ONE_HOST = X2.parent / "one-host-h200"


def test_the_whole_release_cold_then_warm_on_one_host_recomputes_from_its_runs() -> None:
    """Cold 827.7 s and warm 729.5 s, each over two calls; no verdict changed; 2.65% / 18.63% over the 164 rows
    ok in both. Two loads compiled their extension again in both runs, and said why: ninja's deps log two
    ninjas had written (cudal1/evaluator/ninja_logs.py now removes such a log before a build)."""
    bench = load_script("release_bench")
    cold_run, warm_run = bench.run_summary(ONE_HOST / "cold"), bench.run_summary(ONE_HOST / "warm")
    assert (round(cold_run["wall_s"], 1), round(warm_run["wall_s"], 1)) == (827.7, 729.5)
    assert cold_run["calls"] == warm_run["calls"] == 2
    cold, warm = (bench.programs_only(load_evaluations(ONE_HOST / name / "results.jsonl")) for name in ("cold", "warm"))
    agree = bench.agreement(cold, warm)
    assert agree["flips"] == [] and agree["rows"] == 164
    assert (round(agree["median"], 4), round(agree["p95"], 4)) == (0.0265, 0.1863)
    for run in (cold, warm):
        rebuilt = {pid: e.extra["cache_rebuilt"] for pid, e in run.items() if e.extra.get("cache_rebuilt")}
        assert sorted(rebuilt) == ["L1-88", "L1-97"]
        assert all("premature end of file" in why for why in rebuilt.values())


# the same pair on the mended build path, another H200 host, 2026-11-29 (docs/gpu-runs.md#2026-11-29-healed-release)
HEALED = X2.parent / "one-host-h200-healed"


def test_the_whole_release_on_the_mended_build_path_is_the_committed_json() -> None:
    """Cold 742.5 s and warm 588.5 s (79%), each over two calls, the cold run's first stopped with builds under
    way; no load compiled again; no verdict changed; 2.82% / 19.74% over the 164 rows ok in both."""
    bench = load_script("release_bench")
    cold_run, warm_run = bench.run_summary(HEALED / "cold"), bench.run_summary(HEALED / "warm")
    assert (round(cold_run["wall_s"], 1), round(warm_run["wall_s"], 1)) == (742.5, 588.5)
    assert cold_run["calls"] == warm_run["calls"] == 2
    first_call = json.loads((HEALED / "cold" / "calls.jsonl").read_text().splitlines()[0])
    assert first_call["stopped_by_limit"] and first_call["evaluations_after"] == 94
    cold, warm = (bench.programs_only(load_evaluations(HEALED / name / "results.jsonl")) for name in ("cold", "warm"))
    agree = bench.agreement(cold, warm)
    assert agree["flips"] == [] and agree["rows"] == 164
    assert (round(agree["median"], 4), round(agree["p95"], 4)) == (0.0282, 0.1974)
    for run in (cold, warm):
        assert not [pid for pid, e in run.items() if e.extra.get("cache_rebuilt") or e.extra.get("cache_healed")]
        assert max(e.build_s or 0.0 for e in run.values()) < 3.0  # every build was done ahead, none at a load


# one GPU against both and one RL epoch on the mended build path, a third 2x H200 host, 2026-11-29
# (docs/gpu-runs.md#2026-11-29-two-gpu-healed)
X2_HEALED = X2.parent / "two-gpu-x2-h200-healed"


def test_one_gpu_against_both_on_the_mended_build_path_is_the_committed_json() -> None:
    """One GPU 631.1 s over three calls (the first stopped after one row), both GPUs 317.6 s and 321.1 s:
    1.987x and 1.965x, median 1.976x; no verdict changed over the three runs; the RL epoch's evaluation 14.5%
    of it. The JSON holds both figures with their own date and command, none kept from an earlier JSON."""
    bench = load_script("release_bench")
    one, twos = X2_HEALED / "one", [X2_HEALED / "two", X2_HEALED / "two2"]
    figures = bench.update_two_gpu({}, [one, one], twos, "cmd", "2026-11-29", "warm")
    pairs = figures["details"]["two_gpu"]["pairs"]
    assert [p["speedup"] for p in pairs] == [1.987, 1.965] and figures["two_gpu_speedup"] == 1.976
    assert [p["rows_s_two_over_one"] for p in pairs] == [1.031, 1.052]
    assert [p["host_pace_two_over_one"] for p in pairs] == [0.968, 0.95]
    calls = [json.loads(line) for line in (one / "calls.jsonl").read_text().splitlines()]
    assert [c["evaluations_after"] for c in calls] == [1, 187, 210] and calls[0]["stopped_by_limit"]
    runs = {name: bench.programs_only(load_evaluations(X2_HEALED / name / "results.jsonl")) for name in ("one", "two", "two2")}
    for a, b in (("one", "two"), ("one", "two2"), ("two", "two2")):
        agree = bench.agreement(runs[a], runs[b])
        assert agree["flips"] == [] and agree["rows"] == 164
    rl = bench.update_rl({}, X2_HEALED / "learning" / "learning.json", "cmd", "2026-11-29")
    assert rl["rl_eval_share"] == 0.145 and rl["details"]["rl"]["evaluated"] == 18
    committed = json.loads((X2.parent / "release-h100.json").read_text())
    assert committed["two_gpu_speedup"] == 1.976
    assert committed["details"]["two_gpu"]["date"] == "2026-11-29" and "827d9b8" in committed["details"]["two_gpu"]["command"]


# one RL epoch of learning_gpu.py on the current evaluator, twice, one H200, 2026-12-02
# (docs/gpu-runs.md#2026-12-02-rl-share)
RL_SHARE = X2.parent / "rl-share-h200"
RL_UNWRAP = X2.parent / "rl-unwrap-h200"


def test_the_rl_epochs_evaluation_share_on_the_current_code_is_the_committed_json() -> None:
    """Three runs of one RL epoch on the code whose fine-tune unwraps accelerate's autocast forward, each from
    an empty output folder: evaluation 27.9%, 49.1% and 47.1% of the epoch; the JSON holds the median run's.
    The two runs before that change read 9.8% and 10.1%: their generation ran under the SFT trainer's autocast
    wrapper, 6.4-8.6 s against 0.67-0.95 s (old4, beside them), so the share was small for a slow epoch."""
    bench = load_script("release_bench")
    shares = [bench.update_rl({}, RL_UNWRAP / run / "learning.json", "cmd", "2026-12-02") for run in ("l1", "l2", "l3")]
    assert [s["rl_eval_share"] for s in shares] == [0.279, 0.491, 0.471]
    before = [bench.update_rl({}, RL_SHARE / run / "learning.json", "cmd", "2026-12-02") for run in ("l1", "l2")]
    assert [s["rl_eval_share"] for s in before] == [0.098, 0.101]
    generation = {run: json.loads((RL_UNWRAP / run / "learning.json").read_text())["rl_epoch"]["generation_s"]
                  for run in ("l1", "l2", "l3", "old4")}
    assert max(generation[r] for r in ("l1", "l2", "l3")) < 1.0 < 8.0 < generation["old4"]


# the same epoch with static verdicts recorded before the device loop, alternating with the code before,
# one H200, 2026-12-02 (docs/gpu-runs.md#2026-12-02-static-verdicts)
STATIC = X2.parent / "static-verdicts-h200"


def test_static_verdicts_lower_the_share() -> None:
    """Of the alternating runs whose files came back: the new code's 35.3%, 37.6% and 45.1% (three more, in
    the call's output only: 31.0%, 38.2%, 36.5%), the code before's 32.8%, 50.8% and 48.6% (with 37.7% and
    43.4% in the output). The JSON held new5, the upper of the six new runs' two middle ones, until the
    runs below."""
    bench = load_script("release_bench")
    share = {run: bench.update_rl({}, STATIC / run / "learning.json", "cmd", "2026-12-02")["rl_eval_share"]
             for run in ("new4", "new5", "new6", "old3", "old4", "old5")}
    assert share == {"new4": 0.353, "new5": 0.376, "new6": 0.451, "old3": 0.328, "old4": 0.508, "old5": 0.486}


# then with an all-finite chunk's comparison figures in one device read, after the GPU suite, one H200,
# 2026-12-02 (docs/gpu-runs.md#2026-12-02-compare-one-read)
ONE_READ = X2.parent / "compare-one-read-h200"


# and on the tree of the closing change (one static parse a candidate), after the GPU suite on it
FINAL = X2.parent / "final-tree-h200"


def test_four_epochs_on_the_closing_tree_of_the_static_verdicts() -> None:
    """Three runs on ec6b0c3: 38.4%, 22.2%, 31.7%; four on c6e9c06: 33.3%, 28.4%, 32.0%, 48.7% (the JSON held
    f1, the upper of the two middle runs, until the runs on the kept references below), after the GPU suite
    passed on both trees."""
    bench = load_script("release_bench")
    before = [bench.update_rl({}, ONE_READ / run / "learning.json", "cmd", "2026-12-02")["rl_eval_share"]
              for run in ("c1", "c2", "c3")]
    assert before == [0.384, 0.222, 0.317]
    share = [bench.update_rl({}, FINAL / run / "learning.json", "cmd", "2026-12-02")["rl_eval_share"]
             for run in ("f1", "f2", "f3", "f4")]
    assert share == [0.333, 0.284, 0.32, 0.487]
    assert all("115 passed" in (d / "gpu-tests.log").read_text() for d in (ONE_READ, FINAL))


# the references kept between reward calls (kept.py), after the GPU suite on that tree, 2026-12-02
# (docs/gpu-runs.md#2026-12-02-kept-references)
KEPT = X2.parent / "kept-references-h200"


def test_three_epochs_with_the_references_kept() -> None:
    bench = load_script("release_bench")
    share = [bench.update_rl({}, KEPT / run / "learning.json", "cmd", "2026-12-02")["rl_eval_share"]
             for run in ("l1", "l2", "l3")]
    assert share == [0.193, 0.255, 0.345]
    assert "116 passed" in (KEPT / "gpu-tests.log").read_text()


def test_reward_calls_with_kept_references_end_sooner() -> None:
    """trial_split.py --keep on the same host: each call with the references kept ended before every call
    that started and closed its own."""
    runs = json.loads((KEPT / "keep.json").read_text())
    walls = {arm: [w for a, w in zip(runs["arms"], runs["walls_s"]) if a == arm] for arm in ("fresh", "kept")}
    fresh = walls["fresh"][1:]  # the first fresh call also paid the fork server's start
    assert len(fresh) == len(walls["kept"]) == 3 and max(walls["kept"]) < min(fresh)
    assert all(r["status"] == "ok" for r in runs["rows"])


# re-measurements that stop once they agree, each release run one process from first row to last, a fourth
# H200 host, 2026-11-29 (docs/gpu-runs.md#2026-11-29-recheck-early)
EARLY = X2.parent / "recheck-early-h200"


def run_log_summary(run: Path) -> dict:
    """The run's own summary: its log's last line."""
    return json.loads((run / "run.log").read_text().splitlines()[-1])


def beyond_kept(run: Path) -> float:
    """The run's time past each row's kept evaluation (re-measurements and confirmations), summed."""
    return run_log_summary(run)["time_split_s"]["row_beyond_kept_s"]


def one_call_pair(folder: Path, walls: tuple[float, float]) -> tuple[dict, dict, dict]:
    """A cold and a warm run of the whole release in ``folder``, each one process from its first row to its last
    (one call, not stopped, all 210 programs) with the given walls: both runs' programs, and their agreement
    with no verdict changed over the 164 rows ok in both."""
    bench = load_script("release_bench")
    runs = [bench.run_summary(folder / name) for name in ("cold", "warm")]
    assert tuple(round(r["wall_s"], 1) for r in runs) == walls and [r["calls"] for r in runs] == [1, 1]
    for run in ("cold", "warm"):
        (call,) = [json.loads(line) for line in (folder / run / "calls.jsonl").read_text().splitlines()]
        assert not call["stopped_by_limit"] and (call["evaluations_before"], call["evaluations_after"]) == (0, 210)
    cold, warm = (bench.programs_only(load_evaluations(folder / name / "results.jsonl")) for name in ("cold", "warm"))
    agree = bench.agreement(cold, warm)
    assert agree["flips"] == [] and agree["rows"] == 164
    return cold, warm, agree


def test_the_whole_release_with_re_measurements_that_stop_once_they_agree() -> None:
    """Cold 630.3 s and warm 554.4 s (88%), each one run; no verdict changed; 2.16% / 22.29% over the 164 rows
    ok in both; the second measurement of 40 of the 46 re-checked rows took the least trials; the time past the
    kept evaluations 116.7 s cold and 102.3 s warm (128.6 s and 111.8 s on the healed pair)."""
    cold, warm, agree = one_call_pair(EARLY, (630.3, 554.4))
    assert (round(agree["median"], 4), round(agree["p95"], 4)) == (0.0216, 0.2229)
    rechecked = [e for run in (cold, warm) for e in run.values() if "recheck_trials" in e.extra]
    assert len(rechecked) == 46 and sum(e.extra["recheck_trials"][1] == 5 for e in rechecked) == 40
    for e in rechecked:  # the kept figure is the slowest measured, whichever stopped early
        assert e.speedup == min(e.extra["recheck_speedups"]) and len(e.extra["recheck_trials"]) == len(e.extra["recheck_speedups"])
    assert [beyond_kept(d / name) for d in (EARLY, HEALED) for name in ("cold", "warm")] == [116.7, 102.3, 128.6, 111.8]


# the worker back in its wait before its idle CPU is read, on top of the closes beside the device loop, each
# release run one process from first row to last, a fifth H200 host, 2026-12-01 (docs/gpu-runs.md#2026-12-01-wake-wait)
WAKE = X2.parent / "wake-wait-h200"


def test_the_whole_release_on_the_wait_for_a_worker_asleep() -> None:
    """Cold 641.3 s and warm 533.2 s (83%), each one run; no verdict changed; 2.48% / 16.30% over the 164 rows
    ok in both; 24 rows re-checked cold and 21 warm, none measured a third time; the time past the kept
    evaluations 107.6 s cold and 87.0 s warm; no program rejected for its idle CPU."""
    cold, warm, agree = one_call_pair(WAKE, (641.3, 533.2))
    for run in ("cold", "warm"):
        summary = run_log_summary(WAKE / run)
        assert summary["rejected_for_idle_work"] == [] and summary["candidate_idle_cpu_ms_max"] < 0.5
    assert (round(agree["median"], 4), round(agree["p95"], 4)) == (0.0248, 0.163)
    rechecked = {name: [e for e in run.values() if "recheck_speedups" in e.extra] for name, run in (("cold", cold), ("warm", warm))}
    assert (len(rechecked["cold"]), len(rechecked["warm"])) == (24, 21)
    for e in rechecked["cold"] + rechecked["warm"]:
        assert len(e.extra["recheck_speedups"]) == 2 and e.speedup == min(e.extra["recheck_speedups"])
    assert [beyond_kept(WAKE / name) for name in ("cold", "warm")] == [107.6, 87.0]


# the current evaluator (that of 6d51b6b: whole Philox blocks, sums in place, a three-call calibration), each
# release run one process from first row to last, then three RL epochs, one H200, 2026-12-04
# (docs/gpu-runs.md#2026-12-04-release-pair)
PAIR = X2.parent / "release-pair-2026-12-04-h200"


def test_the_current_evaluator_s_release_pair_is_the_committed_json() -> None:
    """Cold 632.5 s and warm 544.1 s (86%), each one run; no verdict changed; 2.80% / 16.28% over the 164 rows
    ok in both; every kept re-checked figure the slowest measured; the overhead and `evaluate-one` of the same
    machine; the RL share the median of three epochs there."""
    bench = load_script("release_bench")
    cold, warm, agree = one_call_pair(PAIR, (632.5, 544.1))
    assert (round(agree["median"], 4), round(agree["p95"], 4)) == (0.028, 0.1628)
    for e in (e for run in (cold, warm) for e in run.values() if "recheck_speedups" in e.extra):
        assert e.speedup == min(e.extra["recheck_speedups"])
    for run in ("cold", "warm"):
        assert run_log_summary(PAIR / run)["rejected_for_idle_work"] == []
    overhead = json.loads((PAIR / "i" / "ov" / "overhead.json").read_text())["_summary"]["harness_overhead_us_median"]
    evaluate_one = json.loads((PAIR / "i" / "ov" / "evaluate_one.json").read_text())
    share = [bench.update_rl({}, PAIR / run / "learning.json", "cmd", "2026-12-04")["rl_eval_share"]
             for run in ("l1", "l2", "l3")]
    assert share == [0.365, 0.198, 0.406] and evaluate_one["result"]["status"] == "ok"
    committed = json.loads((X2.parent / "release-h100.json").read_text())
    assert (committed["cold_wall_s"], committed["warm_wall_s"], committed["verdict_flips"]) == (632.5, 544.1, 0)
    assert (committed["agreement_median"], committed["agreement_p95"]) == (0.028, 0.1628)
    assert committed["gpu"] == "NVIDIA H200" and committed["harness_overhead_us_median"] == overhead == 67.4
    assert committed["evaluate_one_wall_s"] == evaluate_one["wall_s"] == 6.44 and committed["details"]["warm_over_cold"] == 0.86
    assert "ee9d6c9" in committed["command"] and "release-pair-2026-12-04-h200" in committed["command"]
    assert (committed["details"]["cold_calls"], committed["details"]["warm_calls"]) == (1, 1)
    assert committed["rl_eval_share"] == sorted(share)[1] <= 0.40 and committed["details"]["rl"]["date"] == "2026-12-04"
    assert "release-pair-2026-12-04-h200" in committed["details"]["rl"]["command"]
    assert "rl_eval_share" not in committed["details"].get("kept_from", {})
