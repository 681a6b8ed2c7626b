"""The learning stages measured on a GPU: the smoke run and the recipe.

One use a call, each through the stages' core functions (cudal1.training, cudal1.generation), not a copy of
them:

    # GPU smoke run: tiny policy -> SFT -> one contrastive-RL epoch on the first starter problems; its last
    # output line (JSON) is what benchmarks/release_bench.py --rl reads
    PYTHONPATH=. python3 benchmarks/learning_gpu.py --device cuda:0 --problems 6 --sft-epochs 20 --out /tmp/lgpu
    # the recipe with an overlay's params (configs/gpu-real-model.yaml): augment (template and file teachers) ->
    # SFT -> self-supervised rounds -> contrastive RL, each epoch measured on its problems and on held-out ones
    PYTHONPATH=. python3 benchmarks/learning_gpu.py --recipe --params-overlay configs/gpu-real-model.yaml \\
        --model /models/qwen-coder-1.5b --out /tmp/recipe
    # (benchmarks/release_bench.py --recipe /tmp/recipe turns the run into a results folder with its curves)

Neither needs prefect, mlflow or polars. ``--dry-run`` prints the settings and stops before torch
is imported.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# 8 KernelBench problems of levels 1-2 the recipe holds out (none in configs/gpu-real-model.yaml's ids), each
# with a release program that measured correct on an H200 (results/release-h200): never trained on, never
# shown a release program, measured after every epoch.
HELD_OUT = ("L1-7", "L1-22", "L1-63", "L2-12", "L2-40", "L2-51", "L2-68", "L2-76")


class Stopwatch:
    """Seconds spent inside wrapped calls, by name, and seconds added by hand (builds)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def wrap(self, name: str, fn: Any) -> Any:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.add(name, time.perf_counter() - start)

        return timed

    def evaluator(self, name: str, evaluate: Any) -> Any:
        """``evaluate`` timed under ``name``, the extension builds of what it measured under ``<name>_builds``
        (summed over programs: builds run in parallel, so this can exceed the evaluation's wall)."""
        def timed(problems: Any, candidates: Any) -> Any:
            found = self.wrap(name, evaluate)(problems, candidates)
            self.add(f"{name}_builds", sum(e.build_s or 0.0 for e in found))
            return found

        return timed


def measured_corpus(problems: list, protocol: Any) -> list:
    """The smoke run's corpus: the template teacher's programs for each problem, measured on the GPU."""
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
    parser.add_argument("--problems", type=int, default=15, help="smoke: first N starter problems")
    parser.add_argument("--problems-limit", type=int, default=None, help="recipe: the first N training problems")
    parser.add_argument("--sft-epochs", type=float, default=20, help="smoke: SFT epochs")
    parser.add_argument("--generations", type=int, default=4, help="smoke: G")
    parser.add_argument("--out", default="/tmp/cudal1-learning-gpu")
    parser.add_argument("--rl-epochs", type=int, default=None,
                        help="RL epochs (smoke: 1, each one's split in rl_epochs; recipe: the params')")
    parser.add_argument("--recipe", action="store_true", help="the recipe with the params (and --params-overlay)")
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--params-overlay", nargs="+", default=None,
                        help="YAML files merged over --params, in order (e.g. configs/gpu-real-model.yaml, then "
                        "configs/gpu-tiny-policy.yaml)")
    parser.add_argument("--model", default=None, help="recipe: the policy (hub id or folder) instead of policy.model")
    parser.add_argument("--held-out", nargs="*", default=list(HELD_OUT), help="recipe: problem ids held out")
    parser.add_argument("--commit", default=None, help="the commit the run used (default: this checkout's)")
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
    """The smoke run's contrastive-RL epochs with every candidate evaluated on the GPU: the report's
    ``rl_epoch`` (the first epoch's metrics and time split) and, for several epochs, ``rl_epochs`` and
    ``rl_total_s``."""
    from cudal1.pool import CandidatePool
    from cudal1.training.evaluation import evaluator_fn
    from cudal1.training.rl import run_contrastive_rl
    from cudal1.training.settings import RLSettings

    clock = Stopwatch()
    model.generate = clock.wrap("generation", model.generate)  # TRL samples through model.generate
    evaluate_fn = evaluator_fn(protocol)
    settings = RLSettings(epochs=args.rl_epochs, num_generations=args.generations, prompts_per_step=3,
                          max_new_tokens=160, temperature=1.0, learning_rate=2e-4)
    splits: list[dict[str, float]] = []
    on_epoch = epoch_splits(clock, splits)
    t0 = time.perf_counter()
    try:
        model, epochs = run_contrastive_rl(model, tokenizer, {p.problem_id: p for p in problems}, CandidatePool(corpus),
                                           clock.wrap("evaluation", evaluate_fn), settings, out / "rl",
                                           on_epoch=on_epoch)
        total = time.perf_counter() - t0
    finally:
        evaluate_fn.close()
    split = {"generation_s": clock.seconds.get("generation", 0.0), "evaluation_s": clock.seconds.get("evaluation", 0.0)}
    split["training_and_other_s"] = total - sum(split.values())
    # one epoch: its split as it always was, to the run's end; several: each epoch's, to its own end
    report = {"rl_epoch": epochs[0] | (split | {"total_s": total} if args.rl_epochs == 1 else
                                       {k: v for k, v in splits[0].items() if k in SMOKE_SPLIT})}
    if args.rl_epochs > 1:
        report |= {"rl_epochs": [e | {k: v for k, v in part.items() if k in SMOKE_SPLIT}
                                 for e, part in zip(epochs, splits, strict=True)], "rl_total_s": total}
    return report


SMOKE_SPLIT = ("generation_s", "evaluation_s", "training_and_other_s", "total_s")


def epoch_splits(clock: Stopwatch, splits: list[dict[str, float]]) -> Any:
    """An ``on_epoch`` callback appending each epoch's time split: the clock's seconds since the epoch before
    (generation, evaluation, the extension builds within it, the held-out measurement), the rest being
    training (and TRL's own work around it)."""
    names = ("generation", "evaluation", "evaluation_builds", "held_out")
    marks = {"t": time.perf_counter(), **{k: clock.seconds.get(k, 0.0) for k in names}}

    def on_epoch(epoch: int, metrics: dict[str, float]) -> None:
        now = time.perf_counter()
        part = {f"{k.replace('evaluation_', '')}_s": clock.seconds.get(k, 0.0) - marks[k] for k in names}
        total = now - marks["t"]
        # the held-out measurement's own generation and evaluation are counted in held_out_s only
        part["generation_s"] -= metrics.get("held_out_generation_s", 0.0)
        part["training_and_other_s"] = total - part["generation_s"] - part["evaluation_s"] - part["held_out_s"]
        splits.append(part | {"total_s": total})
        marks.update({"t": now, **{k: clock.seconds.get(k, 0.0) for k in names}})

    return on_epoch


def smoke(args: argparse.Namespace) -> None:
    import torch

    from cudal1.evaluator.config import EvalConfig
    from cudal1.generation.tiny_policy import build_tiny_policy
    from cudal1.problems import load_starter_suite
    from cudal1.training.data import sft_examples, tokenizer_texts
    from cudal1.training.finetune import finetune, load_policy
    from cudal1.training.settings import FinetuneSettings, PromptSettings

    assert torch.cuda.is_available(), "no CUDA device: this is the GPU smoke run"
    args.rl_epochs = args.rl_epochs or 1
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


def recipe_augment(problems: list, held_out: set[str], params: Any, clock: Stopwatch) -> tuple[list, list, dict]:
    """The augment stage's core on every problem: the template teacher everywhere, the file teachers on the
    training problems only; every program measured under ``params.protocol`` on ``params.devices``. Returns
    the training corpus, the held-out problems' programs (their prompts' exemplars) and a summary."""
    from collections import Counter

    from cudal1.generation.augment import dedupe
    from cudal1.generation.files import teacher_candidates
    from cudal1.generation.templates import template_candidates
    from cudal1.pool import PoolEntry
    from cudal1.training.evaluation import evaluator_fn

    gpu = any(d.startswith("cuda") for d in params.devices)
    train = [p for p in problems if p.problem_id not in held_out]
    candidates = [c for p in problems for c in template_candidates(p, params.template.variants,
                                                                   params.template.compile_modes, gpu)
                  if params.template.enabled]
    for teacher in params.file_teachers:
        candidates += teacher_candidates(train, teacher)[0]
    candidates = [c for c in dedupe(candidates) if c.origin not in params.corpus_exclude_origins]
    by_id = {p.problem_id: p for p in problems}
    with evaluator_fn(params.protocol, params.devices) as evaluate:
        evaluations = clock.evaluator("augment", evaluate)([by_id[c.problem_id] for c in candidates], candidates)
    entries = [PoolEntry.from_evaluation(c, e, "corpus") for c, e in zip(candidates, evaluations, strict=True) if e.ok]
    summary = {"candidates": len(candidates), "correct_by_origin": dict(Counter(e.origin for e in entries)),
               "statuses": dict(Counter(e.status.value for e in evaluations)),
               "builds_s": sum(e.build_s or 0.0 for e in evaluations)}
    return [e for e in entries if e.problem_id not in held_out], [e for e in entries if e.problem_id in held_out], summary


def recipe_policy(train: list, corpus: list, sections: dict, args: argparse.Namespace, out: Path) -> tuple[Any, Any, dict]:
    """The policy (built when tiny, else loaded from policy.model or --model), fine-tuned by the SFT core."""
    from dataclasses import replace

    from cudal1.generation.backends import default_device
    from cudal1.generation.tiny_policy import build_tiny_policy
    from cudal1.training.data import fit_length, sft_examples, tokenizer_texts
    from cudal1.training.finetune import finetune, load_policy

    policy, sft = sections["policy"], sections["sft"]
    policy = replace(policy, model=args.model) if args.model else policy
    if policy.is_tiny:
        build_tiny_policy(out / "policy", tokenizer_texts(train, corpus), vocab_size=policy.vocab_size,
                          hidden=policy.hidden, layers=policy.layers, max_positions=policy.max_positions, seed=policy.seed)
    model, tokenizer = load_policy(out / "policy" if policy.is_tiny else policy.model)
    rows, dropped = fit_length(sft_examples({p.problem_id: p for p in train}, corpus, sft.prompts, sft.seed, sft.copies),
                               tokenizer, sft.max_length)
    model, summary = finetune(model.to(default_device()), tokenizer, rows, sft, out / "sft-work")
    return model, tokenizer, summary | {"dropped_too_long": dropped, "model": policy.model}


def _entries(path: Path, entries: list | None = None) -> list:
    """Pool entries kept as JSON in a run's folder (the GPU host has no polars): written when given, read else."""
    from dataclasses import asdict

    from cudal1.pool import PoolEntry

    if entries is not None:
        path.write_text(json.dumps([asdict(e) for e in entries]))
        return entries
    return [PoolEntry(**row) for row in json.loads(path.read_text())]


def recipe_inputs(args: argparse.Namespace) -> tuple[dict, list, list]:
    """The params sections (devices checked), the training problems (the first --problems of them when given)
    and the held-out ones."""
    from dataclasses import replace

    from cudal1.config import load_params
    from cudal1.devices import check_devices
    from cudal1.problems import load_suites

    names = ("problems", "augment", "policy", "sft", "self_supervised", "contrastive_rl")
    sections = {s: load_params(args.params, s, args.params_overlay) for s in names}
    for s in ("augment", "self_supervised", "contrastive_rl"):
        check_devices(sections[s].devices, f"{s}.devices")
    held_out = tuple(sorted(set(args.held_out)))
    train = load_suites(sections["problems"])[: args.problems_limit]
    held = load_suites(replace(sections["problems"], ids=held_out, limit=None)) if held_out else []
    assert not set(held_out) & {p.problem_id for p in train}, "a held-out problem is among the training problems"
    return sections, train, held


def recipe(args: argparse.Namespace) -> None:
    """augment -> SFT -> self-supervised -> contrastive RL with the params (and overlay) given, every epoch also
    measured on the held-out problems. OUT/learning.json grows as each stage ends; a rerun with the same OUT
    resumes after the last finished stage (RL after its last finished epoch)."""

    import torch

    from cudal1.measured import git_commit
    from cudal1.pool import CandidatePool
    from cudal1.training.evaluation import evaluator_fn
    from cudal1.training.finetune import load_policy, save_policy
    from cudal1.training.self_supervised import run_self_supervised

    sections, train, held = recipe_inputs(args)
    out, clock = Path(args.out), Stopwatch()
    out.mkdir(parents=True, exist_ok=True)
    known = json.loads((out / "learning.json").read_text()) if (out / "learning.json").is_file() else {}
    report: dict[str, Any] = known | {
        "command": " ".join(["python3", "benchmarks/learning_gpu.py", *sys.argv[1:]]), "commit": args.commit or git_commit(),
        "date": time.strftime("%Y-%m-%d", time.gmtime()), "torch": torch.__version__,
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "problems": [p.problem_id for p in train], "held_out": [p.problem_id for p in held]}
    save = lambda: (out / "learning.json").write_text(json.dumps(report, indent=1, default=float) + "\n")  # noqa: E731
    if "augment" not in report:
        t0 = time.perf_counter()
        corpus, held_corpus, report["augment"] = recipe_augment(train + held, set(args.held_out), sections["augment"], clock)
        report["augment"]["seconds"] = time.perf_counter() - t0
        _entries(out / "corpus.json", corpus), _entries(out / "held-out-corpus.json", held_corpus), save()
    corpus, held_corpus = _entries(out / "corpus.json"), _entries(out / "held-out-corpus.json")
    if "sft" not in report:
        t0 = time.perf_counter()
        model, tokenizer, report["sft"] = recipe_policy(train, corpus, sections, args, out)
        report["sft"]["seconds"] = time.perf_counter() - t0
        save_policy(model, tokenizer, out / "sft-policy"), save()
    ssl, by_id = sections["self_supervised"], {p.problem_id: p for p in train}
    if "self_supervised" not in report:
        model, tokenizer = load_policy(out / "sft-policy")
        pool, t0 = CandidatePool(corpus), time.perf_counter()
        with evaluator_fn(ssl.protocol, ssl.devices) as evaluate:
            model, report["self_supervised"] = run_self_supervised(model, tokenizer, by_id, pool, evaluate, ssl, out / "ssl")
        report["self_supervised_seconds"] = time.perf_counter() - t0
        save_policy(model, tokenizer, out / "ssl-policy"), _entries(out / "pool.json", pool.entries()), save()
    recipe_rl(args, sections["contrastive_rl"], by_id, {p.problem_id: p for p in held}, held_corpus, report, save, clock)
    print(json.dumps(report, default=float))


def recipe_rl(args: argparse.Namespace, rl: Any, by_id: dict, held_by_id: dict, held_corpus: list, report: dict,
              save: Any, clock: Stopwatch) -> None:
    """The RL epochs not finished in OUT/rl, each epoch's figures, time split and held-out figures appended to
    ``report["rl_epochs"]`` (and saved) as it ends; the pool kept in OUT/pool-rl.json."""
    from dataclasses import replace

    from cudal1.pool import CandidatePool
    from cudal1.training.evaluation import evaluator_fn
    from cudal1.training.finetune import load_policy
    from cudal1.training.rl import held_out_metrics, run_contrastive_rl

    out, settings = Path(args.out), replace(rl, epochs=args.rl_epochs or rl.epochs)

    def time_generation(model: Any) -> Any:
        # TRL samples through model.generate; a resumed run trains the last epoch's policy, loaded anew,
        # whose generate must be timed as well (else its generation lands in training_and_other_s)
        model.generate = clock.wrap("generation", model.generate)
        return model

    model, tokenizer = load_policy(out / "ssl-policy")
    model = time_generation(model)
    kept = out / "pool-rl.json"
    pool = CandidatePool(_entries(kept if kept.is_file() else out / "pool.json"))
    held_pool, held_cache, splits = CandidatePool(held_corpus), CandidatePool(), []
    report.setdefault("rl_epochs", [])

    def after_epoch(policy: Any, evaluate: Any) -> dict[str, float]:
        start, generated = time.perf_counter(), clock.seconds.get("generation", 0.0)
        figures = held_out_metrics(policy, tokenizer, held_by_id, held_pool, clock.evaluator("held_out_evaluation",
                                   evaluate), settings, cache=held_cache, seed=settings.seed) if held_by_id else {}
        clock.add("held_out", time.perf_counter() - start)
        return figures | {"held_out_generation_s": clock.seconds.get("generation", 0.0) - generated}

    def on_epoch(epoch: int, metrics: dict[str, float]) -> None:
        timed(epoch, metrics)  # the epochs' clock, started below once the policy before RL has been measured
        report["rl_epochs"].append(metrics | splits[-1])
        _entries(kept, pool.entries()), save()

    with evaluator_fn(settings.protocol, settings.devices) as evaluate:
        if "held_out_before_rl" not in report:
            report["held_out_before_rl"] = after_epoch(model, evaluate)
            save()
        # the first epoch's split starts here: the measurement before RL counted in it gave its generation twice
        t0 = time.perf_counter()
        timed = epoch_splits(clock, splits)
        run_contrastive_rl(model, tokenizer, by_id, pool, clock.evaluator("evaluation", evaluate), settings, out / "rl",
                           on_epoch=on_epoch, after_epoch=lambda e, m: after_epoch(m, evaluate),
                           load_model=lambda path: time_generation(load_policy(path)[0]))
    report["rl_seconds"] = report.get("rl_seconds", 0.0) + time.perf_counter() - t0
    save()


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.dry_run:
        print(json.dumps(vars(args) | {"CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES")}))
        return
    if args.recipe:
        recipe(args)
    else:
        smoke(args)


if __name__ == "__main__":
    main()
