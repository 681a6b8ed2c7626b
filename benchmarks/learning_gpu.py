"""GPU smoke run of the learning stages: tiny policy -> SFT -> one contrastive-RL epoch (TRL GRPOTrainer),
with every candidate evaluated on the GPU. Prints the time split between generation, evaluation and
training, and the epoch's metrics, as one JSON line at the end.

Needs torch, transformers, accelerate, trl and datasets (no prefect, mlflow or polars: the corpus is made
and measured here, the pool is kept in memory). Run from the repository root on a GPU machine:

    PYTHONPATH=. python3 benchmarks/learning_gpu.py --device cuda:0 --problems 6 --sft-epochs 20 --out /tmp/lgpu

``--dry-run`` prints the run's settings as JSON and stops before torch is imported. benchmarks/release_bench.py
--rl turns the last output lines of several runs into results/rl-share-<gpu>.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


class Stopwatch:
    """Seconds spent inside wrapped calls, by name."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def wrap(self, name: str, fn: Any) -> Any:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start

        return timed


def measured_corpus(problems: list, protocol: Any) -> list:
    """The template teacher's programs for each problem, measured on the GPU: the SFT data and the
    starting pool."""
    from cudal1.generation.templates import template_candidates
    from cudal1.pool import PoolEntry
    from cudal1.training.evaluation import evaluator_fn

    candidates = [c for p in problems for c in template_candidates(p, ["no_grad", "inference_mode", "cuda_graph"],
                                                                    gpu=True)]
    by_id = {p.problem_id: p for p in problems}
    with evaluator_fn(protocol) as evaluate:  # its references end here: the RL stage starts its own
        evaluations = evaluate([by_id[c.problem_id] for c in candidates], candidates)
    return [PoolEntry.from_evaluation(c, e, "corpus") for c, e in zip(candidates, evaluations, strict=True) if e.ok]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--problems", type=int, default=15, help="first N starter problems")
    parser.add_argument("--sft-epochs", type=float, default=20)
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--out", default="/tmp/cudal1-learning-gpu")
    parser.add_argument("--rl-epochs", type=int, default=1,
                        help="RL epochs; each one's split goes to rl_epochs (rl_epoch stays the first)")
    parser.add_argument("--dry-run", action="store_true", help="print the settings and stop")
    args = parser.parse_args(argv)
    # TRL's trainers refuse a process that sees several GPUs (they would wrap the model in DataParallel).
    # Only the asked device is made visible, before torch starts CUDA; it is then cuda:0 to this process and
    # its workers.
    if args.device.startswith("cuda:") and "CUDA_VISIBLE_DEVICES" not in os.environ:
        os.environ["CUDA_VISIBLE_DEVICES"] = args.device.split(":", 1)[1]
        args.device = "cuda:0"
    return args


def rl_stage(model: Any, tokenizer: Any, problems: list, corpus: list, protocol: Any, args: argparse.Namespace,
             out: Path) -> dict[str, Any]:
    """The contrastive-RL epochs with every candidate evaluated on the GPU: the report's ``rl_epoch`` (the
    first epoch's metrics and time split) and, for several epochs, ``rl_epochs`` and ``rl_total_s``."""
    from cudal1.pool import CandidatePool
    from cudal1.training.evaluation import evaluator_fn
    from cudal1.training.rl import run_contrastive_rl
    from cudal1.training.settings import RLSettings

    clock = Stopwatch()
    model.generate = clock.wrap("generation", model.generate)  # TRL samples through model.generate
    evaluate_fn = evaluator_fn(protocol)
    evaluate = clock.wrap("evaluation", evaluate_fn)
    settings = RLSettings(epochs=args.rl_epochs, num_generations=args.generations, prompts_per_step=3,
                          max_new_tokens=160, temperature=1.0, learning_rate=2e-4)
    splits: list[dict[str, float]] = []
    marks = {"t": time.perf_counter(), "generation": 0.0, "evaluation": 0.0}

    def on_epoch(epoch: int, metrics: dict[str, float]) -> None:
        """Each epoch's split: the clock's seconds since the epoch before (the reward calls of later epochs
        take the problems' references kept by the evaluator)."""
        now = time.perf_counter()
        split = {k: clock.seconds.get(k, 0.0) - marks[k] for k in ("generation", "evaluation")}
        total = now - marks["t"]
        splits.append({"generation_s": split["generation"], "evaluation_s": split["evaluation"],
                       "training_and_other_s": total - sum(split.values()), "total_s": total})
        marks.update({"t": now, **{k: clock.seconds.get(k, 0.0) for k in ("generation", "evaluation")}})

    t0 = time.perf_counter()
    try:
        model, epochs = run_contrastive_rl(model, tokenizer, {p.problem_id: p for p in problems},
                                           CandidatePool(corpus), evaluate, settings, out / "rl", on_epoch=on_epoch)
        total = time.perf_counter() - t0
    finally:
        evaluate_fn.close()
    split = {"generation_s": clock.seconds.get("generation", 0.0), "evaluation_s": clock.seconds.get("evaluation", 0.0)}
    split["training_and_other_s"] = total - sum(split.values())
    # one epoch: its split as it always was, to the run's end; several: each epoch's, to its own end
    report = {"rl_epoch": epochs[0] | (split | {"total_s": total} if args.rl_epochs == 1 else splits[0])}
    if args.rl_epochs > 1:
        report |= {"rl_epochs": [e | part for e, part in zip(epochs, splits, strict=True)], "rl_total_s": total}
    return report


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.dry_run:
        print(json.dumps(vars(args) | {"CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES")}))
        return

    import torch

    from cudal1.evaluator.config import EvalConfig
    from cudal1.generation.tiny_policy import build_tiny_policy
    from cudal1.problems import load_starter_suite
    from cudal1.training.data import sft_examples, tokenizer_texts
    from cudal1.training.finetune import finetune, load_policy
    from cudal1.training.settings import FinetuneSettings, PromptSettings

    assert torch.cuda.is_available(), "no CUDA device: this is the GPU smoke run"
    out = Path(args.out)
    report: dict[str, Any] = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__}
    problems = load_starter_suite()[: args.problems]
    protocol = EvalConfig(device=args.device, correctness_trials=2, timing_trials=3, target_trial_ms=10.0,
                          warmup_iters=1, remeasure=0)

    t0 = time.perf_counter()
    corpus = measured_corpus(problems, protocol)
    report["corpus_programs"], report["corpus_seconds"] = len(corpus), time.perf_counter() - t0

    t0 = time.perf_counter()
    build_tiny_policy(out / "policy", tokenizer_texts(problems, corpus), hidden=256, layers=4)
    model, tokenizer = load_policy(out / "policy")
    rows = sft_examples({p.problem_id: p for p in problems}, corpus, PromptSettings(), copies=2)
    model, sft = finetune(model.to("cuda"), tokenizer, rows,
                          FinetuneSettings(epochs=args.sft_epochs, learning_rate=1e-3, batch_size=4), out / "sft-work")
    report["sft"] = sft | {"seconds": time.perf_counter() - t0}
    report |= rl_stage(model, tokenizer, problems, corpus, protocol, args, out)
    print(json.dumps(report, default=float))


if __name__ == "__main__":
    main()
