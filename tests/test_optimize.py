"""`cudal1 optimize` on this CPU: a module written for the test, the real evaluator, real subprocesses and
local HTTP servers that fail the ways endpoints do. (The run against a served model: tests/flows.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest
from optimize_helpers import FAST, RING, bad_endpoint

from cudal1.candidates import load_evaluations
from cudal1.evaluator import EvalConfig
from cudal1.optimize import (
    NO_MODEL_HINT,
    ModelFailure,
    ModuleProblem,
    OptimizeInterrupted,
    OptimizeSettings,
    check_module,
    make_writers,
    optimize,
    read_module,
)
from cudal1.optimize.loop import completion_cache

TEMPLATE_ONLY = OptimizeSettings(rounds=3, samples=2)
REPO = Path(__file__).resolve().parents[1]


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _by_origin(table: pl.DataFrame) -> dict[str, dict]:
    return {row["origin"]: row for row in table.iter_rows(named=True)}


def cudal1(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = os.environ | {"PYTHONPATH": str(REPO)}  # this checkout's cudal1, from any folder
    return subprocess.run([sys.executable, "-m", "cudal1.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout, env=env)


@pytest.mark.slow
def test_template_rewrite_is_measurably_faster_within_a_budget_then_resumed(tmp_path: Path) -> None:
    module = read_module(write(tmp_path, "ring.py", RING))
    # A budget spent by the first batch: the other candidate is left for the next run. The batch is made to
    # outlast the budget (an evaluation alone can take under a second here, with forked workers).
    def outlast_the_budget(_evaluation) -> None:
        time.sleep(1.1)

    short = optimize(module, FAST, [], OptimizeSettings(budget_s=1.0, chunk=1), tmp_path / "out",
                     progress=outlast_the_budget)
    assert short.measured_now == 1 and "time budget (1 s) ran out during round 1" in short.stop
    assert sorted(pl.read_parquet(tmp_path / "out/candidates.parquet")["status"]) == ["not_measured", "ok"]
    state = optimize(module, FAST, [], TEMPLATE_ONLY, tmp_path / "out", command="cudal1 optimize ring.py")
    assert state.measured_now == 1 and len(state.reused) == 1  # the same command continues: nothing twice
    table = pl.read_parquet(tmp_path / "out/candidates.parquet")
    # inference_mode is the real rewrite (about 1.5x here); no_grad changes nothing, but on a CPU shared with
    # other test workers its measurement can land anywhere, so which of the two ranks first is not asserted.
    fast = _by_origin(table)["template:inference_mode"]
    assert fast["status"] == "ok", table.select("origin", "status", "reason")
    # With the other test workers holding both cores, one run has read the rewrite below 1x (CI saw 0.87x on
    # the flow's run). The claim is that the evaluator sees it faster, so a run that does not is followed by up
    # to two fresh runs of the same command, one of which must (docs/testing.md, "Tests made robust").
    lows = [fast["speedup_low"]]
    for again in range(2):
        if max(lows) > 1.0:
            break
        optimize(module, FAST, [], TEMPLATE_ONLY, tmp_path / f"again{again}")
        lows.append(_by_origin(pl.read_parquet(tmp_path / f"again{again}/candidates.parquet"))
                    ["template:inference_mode"]["speedup_low"] or 0.0)
    assert max(lows) > 1.0, lows
    best = table.row(0, named=True)
    assert best["status"] == "ok" and best["rank"] == 1 and best["speedup_low"] >= fast["speedup_low"], best
    assert set(table["origin"]) == {"template:no_grad", "template:inference_mode"}  # no conv: no channels_last
    assert {"status", "reason", "speedup", "speedup_low", "speedup_high", "origin", "round"} <= set(table.columns)
    header = (tmp_path / "out/best.py").read_text()
    assert f"speedup {best['speedup']:.2f}x" in header and "95% interval" in header
    assert "device: cpu" in header and "tolerance" in header and "command: cudal1 optimize ring.py" in header
    assert "class ModelNew(Model)" in header and best["origin"].split(":")[1] in header
    report = (tmp_path / "out/report.md").read_text()
    assert "![speedup by round](speedup_by_round.png)" in report and "template:inference_mode" in report
    assert (tmp_path / "out/speedup_by_round.png").read_bytes()[:4] == b"\x89PNG"
    assert NO_MODEL_HINT in state.messages
    # Round 2 needs a model once round 1 beat the module (a lower bound above 1x); when contention read every
    # rewrite's lower bound at or below 1x (as a full `make test` once did), the run stops at round 1 instead.
    beat = max(r["speedup_low"] or 0.0 for r in table.iter_rows(named=True) if r["status"] == "ok") > 1.0
    assert ("needs a model" if beat else "round 1 brought nothing faster than your module") in state.stop, \
        (state.stop, table.select("origin", "status", "speedup_low"))
    assert len(load_evaluations(tmp_path / "out/evaluations.parquet")) == 2


@pytest.fixture
def interactive_sigint() -> Iterator[None]:
    """SIGINT handled as a terminal's Python handles it (KeyboardInterrupt). A pytest started in the
    background by a shell without job control (`cmd &` in a script, some CI runners) inherits SIGINT
    ignored, and a Ctrl-C sent by a test would vanish."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.slow
@pytest.mark.usefixtures("interactive_sigint")
def test_ctrl_c_keeps_every_finished_evaluation_and_the_rerun_measures_only_the_rest(tmp_path: Path) -> None:
    conv = RING.replace("import torch.nn as nn", "import torch.nn as nn\nimport torch.nn.functional as F")
    conv = conv.replace("return x * 2.0", "return F.conv2d(x.view(1, 1, 8, 8), torch.ones(1, 1, 3, 3))")
    module = read_module(write(tmp_path, "ring_conv.py", conv))  # a conv: three template rewrites

    sent = threading.Event()

    def ctrl_c_after_the_first(_evaluation) -> None:
        # Once: the evaluations still running land after the interrupt and call this again; a second
        # SIGINT would hit whatever runs then (the wait below, the next test) instead of optimize.
        if not sent.is_set():
            sent.set()
            os.kill(os.getpid(), signal.SIGINT)  # what a terminal sends on Ctrl-C

    with pytest.raises(OptimizeInterrupted) as stopped:
        optimize(module, FAST, [], TEMPLATE_ONLY, tmp_path / "out", progress=ctrl_c_after_the_first)
    assert stopped.value.state.interrupted
    while any(t.name.startswith("cudal1-eval-") for t in threading.enumerate()):
        time.sleep(0.2)  # an evaluation already running may still land: it is kept too
    first = {e.candidate_sha256: e for e in load_evaluations(tmp_path / "out/evaluations.parquet")}
    assert 1 <= len(first)
    table = pl.read_parquet(tmp_path / "out/candidates.parquet")
    assert table.height == 3 and set(table["status"]) <= {"ok", "not_measured"}
    again = optimize(module, FAST, [], TEMPLATE_ONLY, tmp_path / "out")
    assert again.reused == set(first) and again.measured_now == 3 - len(first)
    final = load_evaluations(tmp_path / "out/evaluations.parquet")
    assert len(final) == 3 and len({e.candidate_sha256 for e in final}) == 3
    assert all(first[e.candidate_sha256] == e for e in final if e.candidate_sha256 in first)
    assert "not_measured" not in pl.read_parquet(tmp_path / "out/candidates.parquet")["status"].to_list()


USER_FORM = '''import torch
import torch.nn as nn


class Smoother(nn.Module):
    """A user's module, not in benchmark form."""

    def forward(self, x):
        for _ in range(50):
            x = torch.cat([x[1:], x[:1]]).view(-1)[:]
        return x


def example_batch():
    return (torch.randn(64),)
'''


@pytest.mark.slow
def test_a_module_in_its_own_names_runs_from_the_command_line(tmp_path: Path) -> None:
    path = write(tmp_path, "smoother.py", USER_FORM)
    with pytest.raises(ModuleProblem, match=r"no class Model; it defines classes Smoother\. .*--model-class NAME"):
        read_module(path)
    with pytest.raises(ModuleProblem, match=r"no function get_inputs; it defines functions example_batch\. .*--inputs"):
        read_module(path, model_class="Smoother")
    done = cudal1("optimize", "smoother.py", "--model-class", "Smoother", "--inputs", "example_batch", "--out", "out",
                  "--trials", "3", "--correctness-trials", "2", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "template:inference_mode" in done.stdout and "95% interval" in done.stdout  # the rich table
    assert "endpoint" in done.stderr and "better results" in done.stderr
    assert set(pl.read_parquet(tmp_path / "out/candidates.parquet")["status"]) == {"ok"}
    assert "class ModelNew(Model)" in (tmp_path / "out/best.py").read_text()


def test_a_module_that_does_not_import(tmp_path: Path) -> None:
    with pytest.raises(ModuleProblem, match=r"does not import: SyntaxError at line 2"):
        read_module(write(tmp_path, "broken.py", "import torch\ndef get_inputs(:\n"))
    write(tmp_path, "helpers.py", "SIZE = 64\n")
    sibling = write(tmp_path, "uses_helper.py", "from helpers import SIZE\n" + RING)
    with pytest.raises(ModuleProblem, match=r"does not import: ModuleNotFoundError: No module named 'helpers' "
                                            r"\(line 1\)\. It runs as a lone file"):
        check_module(read_module(sibling), FAST)
    done = cudal1("optimize", "uses_helper.py", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    lazy = cudal1("optimize", "uses_helper.py", "--patience", "0", cwd=tmp_path)  # settings are checked first
    assert lazy.returncode == 2 and "patience=0: each must be at least 1" in lazy.stderr
    assert "error: uses_helper.py does not import: ModuleNotFoundError: No module named 'helpers'" in done.stderr


def test_a_model_that_cannot_be_built_or_run_on_its_inputs(tmp_path: Path) -> None:
    needs_args = RING.replace("def __init__(self, steps: int = 100)", "def __init__(self, steps: int)")
    needs_args = needs_args[:needs_args.index("def get_init_inputs")]
    with pytest.raises(ModuleProblem, match=r"building Model\(\) on cpu failed: TypeError.*define get_init_inputs"):
        check_module(read_module(write(tmp_path, "args.py", needs_args)), FAST)
    wrong = RING.replace("torch.randn(64)", "torch.randn(65)")
    with pytest.raises(ModuleProblem, match=r"Model\.forward failed on the inputs from get_inputs\(\) on cpu: "
                                            r"RuntimeError: shape '\[8, 8\]' is invalid.*return the list of arguments"):
        check_module(read_module(write(tmp_path, "wrong.py", wrong)), FAST)


def test_inputs_that_do_not_fit_on_the_device(tmp_path: Path) -> None:
    big = RING.replace("torch.randn(64)", "torch.randn(1 << 29)")  # 2 GiB, over a 1 GiB limit
    small_machine = EvalConfig(correctness_trials=2, timing_trials=3, memory_limit_mb=1024)
    with pytest.raises(ModuleProblem, match=r"the inputs from get_inputs\(\) do not fit on cpu \(the evaluator allows "
                                            r"1024 MB per process on CPU\).*make the inputs smaller"):
        check_module(read_module(write(tmp_path, "big.py", big)), small_machine)


def test_an_endpoint_that_is_down_or_not_an_api_stops_before_any_work(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    cache = completion_cache(tmp_path / "out")
    [down] = make_writers([f"http://127.0.0.1:{port}/v1"], ["some-model"], cache=cache, request_timeout_s=5)
    with pytest.raises(ModelFailure, match=r"--endpoint http://127.0.0.1:\d+/v1 --model some-model.*cannot reach"):
        down.check()
    module = read_module(write(tmp_path, "ring.py", RING))
    with bad_endpoint("html") as url:
        [page] = make_writers([url], ["m"], cache=cache, request_timeout_s=5)
        with pytest.raises(ModelFailure, match=r"GET /models is not an OpenAI-compatible response.*ends in /v1"):
            optimize(module, FAST, [page], TEMPLATE_ONLY, tmp_path / "out")
    assert not (tmp_path / "out/evaluations.parquet").exists()  # stopped before measuring anything
    with pytest.raises(ModelFailure, match="one --model per --endpoint"):
        make_writers([url, url], ["a"], cache=cache)


@pytest.mark.slow
def test_endpoints_failing_mid_run_end_it_with_the_measurements_kept(tmp_path: Path) -> None:
    """One endpoint answers completions with JSON that is no completion, the other never answers: both are
    dropped in round 1, whose template rewrites are still measured, and the run ends there."""
    module = read_module(write(tmp_path, "ring.py", RING))
    with bad_endpoint("no_choices") as garbage, bad_endpoint("hang") as silent:
        writers = make_writers([garbage, silent], ["garbage", "silent"], api="completions", request_timeout_s=1,
                               cache=completion_cache(tmp_path / "out"))
        started = time.monotonic()
        state = optimize(module, FAST, writers, TEMPLATE_ONLY, tmp_path / "out")
    assert time.monotonic() - started < 120
    assert state.failure and "rerun" in state.stop and state.rounds_done == 1
    notes = "\n".join(state.messages)
    assert "--model garbage: the endpoint's answer to POST /completions is not an OpenAI-compatible response" in notes
    assert "--model silent: the endpoint did not answer within 1 s, 2 time(s)" in notes
    table = pl.read_parquet(tmp_path / "out/candidates.parquet")
    assert set(table["origin"]) == {"template:no_grad", "template:inference_mode"}  # measured, kept
    assert set(table["status"]) == {"ok"} and (tmp_path / "out/best.py").exists()


def test_a_trained_policy_is_used_offline_and_its_answers_are_cached(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from cudal1.generation.tiny_policy import build_tiny_policy
    from cudal1.problems import load_starter_suite

    monkeypatch.chdir(tmp_path)
    cache = completion_cache(tmp_path / "out")
    assert make_writers([], [], cache=cache) == []  # nothing trained here: the template teacher alone
    build_tiny_policy(tmp_path / "models/contrastive_rl", [p.source for p in load_starter_suite()], vocab_size=512,
                      hidden=64, layers=2, max_positions=4096)
    [policy] = make_writers([], [], max_tokens=24, cache=cache)  # found where `make run` leaves it
    assert policy.origin == "policy:contrastive_rl"
    policy.check()
    texts, asked = policy.answers("# Task\nWrite a faster version of the reference.", 2)
    assert asked == 2 and len(texts) == 2 and all(isinstance(t, str) for t in texts)
    assert policy.answers("# Task\nWrite a faster version of the reference.", 2) == (texts, 0)  # from the cache
    [missing] = make_writers([], [], policy=str(tmp_path / "no-such-policy"), cache=cache)
    with pytest.raises(ModelFailure, match=r"--policy .*no-such-policy: cannot load it as a transformers model"):
        missing.check()
