"""Teachers: the LLM teacher against a real OpenAI-compatible server (`transformers serve` with a tiny
model built here: conftest.py's ``tiny_server``), the sampling loop with the real evaluator, and the
template teacher's rewrites."""

from __future__ import annotations

import sys

import polars as pl
import pytest
from pipeline_helpers import REDUCED, copy_repo, edit_params, run

from cudal1.evaluator import EvalConfig, evaluate_many
from cudal1.generation.augment import run_teacher
from cudal1.generation.teachers import extract_program
from cudal1.generation.templates import template_candidates, template_source
from cudal1.problems import load_starter_suite

FAST = EvalConfig(correctness_trials=2, timing_trials=2, target_trial_ms=10.0)


@pytest.mark.slow
def test_llm_teacher_samples_the_served_model_and_a_rerun_reuses_its_completions(tiny_server, run_env, tmp_path):
    repo = copy_repo(tmp_path)
    teacher = {"name": "tiny", "base_url": tiny_server["base_url"], "model": tiny_server["model"],
               "api": "completions", "samples_per_problem": 2, "stop_after_successes": 1, "max_tokens": 48,
               "temperature": 1.0}
    edit_params(repo, {"problems": {"ids": ["starter-L1-2"]},
                       "augment": {"template": {"enabled": False}, "teachers": [teacher],
                                   "protocol": REDUCED["augment"]["protocol"]}})
    assert run([sys.executable, "-m", "flows.problems"], repo, run_env).returncode == 0
    first = run([sys.executable, "-m", "flows.augment"], repo, run_env)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    candidates = pl.read_parquet(repo / "data/augment/candidates.parquet")
    evaluations = pl.read_parquet(repo / "data/augment/evaluations.parquet")
    # An untrained model writes no working program: both samples are spent, each one evaluated.
    assert candidates.height == 2 and set(candidates["origin"]) == {"teacher:tiny"}
    assert set(evaluations["candidate_id"]) == set(candidates["candidate_id"])
    assert "ok" not in set(evaluations["status"])
    corpus = pl.read_parquet(repo / "data/augment/corpus.parquet")
    assert corpus.height == 0 and "speedup" in corpus.columns
    cache = repo / "data/cache/completions.jsonl"
    assert len(cache.read_text().splitlines()) == 2
    again = run([sys.executable, "-m", "flows.augment"], repo, run_env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert len(cache.read_text().splitlines()) == 2  # nothing asked twice
    assert pl.read_parquet(repo / "data/augment/candidates.parquet")["candidate_id"].to_list() == \
        candidates["candidate_id"].to_list()


RELU = "import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x.clamp(min=0)\n"


@pytest.mark.slow
def test_a_file_teacher_given_by_an_overlay_reaches_the_corpus(run_env, tmp_path):
    """The augment stage with a file teacher named by an overlay (--params-overlay, as `make run OVERLAY=`
    gives it): its verified program joins the corpus with its origin and analysis, the wrong one does not."""
    import json

    import yaml

    repo = copy_repo(tmp_path)
    edit_params(repo, {"problems": {"ids": ["starter-L1-2"]},
                       "augment": {"template": {"enabled": False}, "protocol": REDUCED["augment"]["protocol"]}})
    rows = [{"problem_id": "L1-19", "program": RELU, "analysis": "ReLU as one clamp"},
            {"problem_id": "L1-19", "program": RELU.replace("min=0", "min=1")}]
    (repo / "programs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    overlay = {"augment": {"file_teachers": [{"name": "file", "path": "programs.jsonl", "ids": {"L1-19": "starter-L1-2"}}]}}
    (repo / "overlay.yaml").write_text(yaml.safe_dump(overlay))
    assert run([sys.executable, "-m", "flows.problems"], repo, run_env).returncode == 0
    done = run([sys.executable, "-m", "flows.augment", "--params-overlay", "overlay.yaml"], repo, run_env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    candidates = pl.read_parquet(repo / "data/augment/candidates.parquet")
    assert candidates.height == 2 and set(candidates["origin"]) == {"teacher:file"}
    corpus = pl.read_parquet(repo / "data/augment/corpus.parquet")
    assert corpus.select("origin", "analysis").rows() == [("teacher:file", "ReLU as one clamp")]
    assert corpus["source"].to_list() == [RELU] and corpus["speedup"][0] > 0


def test_sampling_stops_after_enough_correct_candidates():
    """CUDA-L1's rule with the real evaluator: a failure, then a success, then the problem is done."""
    problem = next(p for p in load_starter_suite() if p.problem_id == "starter-L1-2")
    answers = iter(["I would fuse the kernels.", f"```python\n{template_source(problem, 'no_grad')}\n```"])
    asked = []

    def sample(requests):
        asked.append([index for _, index in requests])
        return [next(answers) for _ in requests]

    def evaluate(batch):
        return evaluate_many([problem], batch, FAST)

    candidates, evaluations = run_teacher([problem], sample, evaluate, "teacher:script", samples_per_problem=5,
                                          stop_after=1, extract=extract_program)
    assert asked == [[0], [1]]
    assert [e.status.value for e in evaluations][1] == "ok" and evaluations[0].status.value != "ok"
    assert candidates[0].source == "I would fuse the kernels." and candidates[1].source.startswith('"""Elementwise')


def test_template_rewrites_of_a_conv_problem_are_correct():
    problem = next(p for p in load_starter_suite() if p.problem_id == "starter-L2-2")
    candidates = template_candidates(problem, ["baseline", "no_grad", "inference_mode", "channels_last", "cuda_graph"])
    assert [c.origin for c in candidates] == ["template:baseline", "template:no_grad", "template:inference_mode",
                                              "template:channels_last"]  # no CUDA graph without a GPU
    evaluations = evaluate_many([problem], candidates, FAST)
    # Timing on a shared CPU can be rejected as noise; correctness must never fail.
    assert {e.status.value for e in evaluations} <= {"ok", "rejected"}, [(e.status, e.reason) for e in evaluations]
    assert all(e.correctness_trials == FAST.correctness_trials for e in evaluations)


def test_template_variants_apply_where_they_make_sense():
    suite = {p.problem_id: p for p in load_starter_suite()}
    relu = template_candidates(suite["starter-L1-2"], ["baseline", "channels_last", "cuda_graph"], ["default"], gpu=True)
    assert [c.origin for c in relu] == ["template:baseline", "template:cuda_graph", "template:compile-default"]
    assert all("class ModelNew(Model)" in c.source and c.problem_id == "starter-L1-2" for c in relu)
    assert len({c.candidate_id for c in relu}) == 3
    with pytest.raises(ValueError, match="unknown template variant"):
        template_source(suite["starter-L1-2"], "fastest")


def test_extract_program_takes_the_last_complete_block():
    text = "plan\n```python\nclass ModelNew: a = 1\n```\nbetter:\n```python\nclass ModelNew: a = 2\n```\n"
    assert extract_program(text).strip() == "class ModelNew: a = 2"
    assert extract_program("```python\nclass ModelNew: a = 1\n") is None  # cut off at max_tokens
    assert extract_program("```python\nprint(1)\n```") is None


def test_one_shot_prompt_holds_the_reference_and_the_format():
    from cudal1.generation.teachers import build_prompt

    problem = load_starter_suite()[0]
    prompt = build_prompt(problem, gpu=True)
    assert problem.source.strip() in prompt and "class ModelNew" in prompt and "CUDA" in prompt
    assert "C++" in build_prompt(problem, gpu=False)
