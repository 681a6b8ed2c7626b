"""A resumed RL stage does not re-evaluate candidates already in the pool. A tiny policy is first taught
one program (so it writes it again and again), then RL runs one epoch, stops, and resumes for a second:
every program the evaluator sees in the second run is new to the pool, and the repeats are served from it."""

from __future__ import annotations

from dataclasses import replace

import pytest
from learning_helpers import light_protocol

from cudal1.generation.templates import template_source
from cudal1.generation.tiny_policy import build_tiny_policy
from cudal1.pool import CandidatePool, PoolEntry
from cudal1.training.data import response_for, sft_examples, tokenizer_texts
from cudal1.training.evaluation import evaluator_fn
from cudal1.training.finetune import finetune, load_policy
from cudal1.training.rl import load_state, run_contrastive_rl
from cudal1.training.settings import FinetuneSettings, PromptSettings, RLSettings

NO_EXEMPLARS = PromptSettings(exemplars=0)


@pytest.mark.slow
def test_resumed_rl_reuses_the_pool(problems, tmp_path):
    p = problems[0]
    program = template_source(p, "no_grad")
    corpus = [PoolEntry(p.problem_id, "c0", "0" * 64, program, "template:no_grad", "ok", 1.0)]
    build_tiny_policy(tmp_path / "policy", tokenizer_texts([p], corpus), vocab_size=1024, hidden=128, layers=2)
    model, tok = load_policy(tmp_path / "policy")
    # Four copies fill one batch: each epoch is one step on the program (eight copies made two identical
    # steps an epoch, twice the training for the same lesson).
    rows = sft_examples({p.problem_id: p}, corpus, NO_EXEMPLARS, copies=4)
    assert rows[0]["completion"] == response_for(corpus[0], p.source, [], CandidatePool(corpus))
    model, _ = finetune(model, tok, rows, FinetuneSettings(epochs=80, learning_rate=3e-3, batch_size=4), tmp_path / "w")

    calls: list[set[tuple[str, str]]] = []
    real = evaluator_fn(light_protocol())

    def recording(probs, cands):
        calls.append({(c.problem_id, c.sha256) for c in cands})
        return real(probs, cands)

    settings = RLSettings(epochs=1, num_generations=4, prompts_per_step=1, max_new_tokens=200, temperature=0.5,
                          learning_rate=1e-5, prompts=NO_EXEMPLARS)
    out, pool_path = tmp_path / "rl", tmp_path / "rl" / "pool.parquet"
    problems_by_id = {p.problem_id: p for p in problems[:1]}
    run_contrastive_rl(model, tok, problems_by_id, CandidatePool(), recording, settings, out, pool_path=pool_path)
    after_first = CandidatePool.load(pool_path)
    first_keys = {(e.problem_id, e.sha256) for e in after_first.entries()}
    assert any(e.ok for e in after_first.entries()), "the taught program should have been written and measured"
    calls.clear()

    resumed_model, epochs = run_contrastive_rl(
        None, tok, problems_by_id, CandidatePool.load(pool_path), recording, replace(settings, epochs=2), out,
        pool_path=pool_path, load_model=lambda path: load_policy(path)[0])
    assert len(epochs) == 2 and len(load_state(out)["epochs"]) == 2
    assert resumed_model is not None
    seen_again = set().union(*calls) if calls else set()
    assert not (seen_again & first_keys), "a program already in the pool was evaluated again"
    assert epochs[1]["cached_rate"] > 0, "the resumed epoch should have met programs the pool already held"
