"""Run a training stage's core without Prefect or MLflow, so it can be started by ``accelerate launch``
(several GPUs, DeepSpeed ZeRO, FSDP: whatever the accelerate config names; TRL's trainers pick the
distributed state up from the launcher's environment):

    accelerate launch --config_file configs/accelerate/multi_gpu.yaml -m cudal1.training.launch sft
    accelerate launch --config_file configs/accelerate/deepspeed_zero2.yaml -m cudal1.training.launch rl

Inputs and outputs are those of the params sections (paths relative to the params file). Only the main
process writes files. In ``rl`` every process evaluates its own share of the completions on its own
device (``cuda:<LOCAL_RANK>`` when the section's devices are CUDA) and keeps its own pool; the main
process's pool is the one saved (docs/guides/gpu.md, "Several GPUs for training").
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import Any


def _is_main() -> bool:
    from accelerate import PartialState

    return PartialState().is_main_process


def run_sft(params_path: str, overlay: str | None = None) -> dict[str, Any]:
    from cudal1.config import load_params
    from cudal1.problems import Problem
    from cudal1.training.data import fit_length, load_corpus, sft_examples
    from cudal1.training.finetune import finetune, load_policy, policy_source, save_policy

    params = load_params(params_path, "sft", overlay)  # its paths resolved against the params file's folder
    problems = _read_problems(params.problems, Problem)
    model, tokenizer = load_policy(policy_source(params.policy))
    rows = sft_examples({p.problem_id: p for p in problems}, load_corpus(params.corpus), params.prompts,
                        params.seed, params.copies)
    rows, _ = fit_length(rows, tokenizer, params.max_length)
    with tempfile.TemporaryDirectory(prefix="cudal1-sft-") as work:
        model, summary = finetune(model, tokenizer, rows, params, work)
    if _is_main():
        save_policy(model, tokenizer, params.out_dir)
    return summary


def run_rl(params_path: str, overlay: str | None = None) -> list[dict[str, float]]:
    from cudal1.config import load_params
    from cudal1.devices import check_devices
    from cudal1.pool import CandidatePool
    from cudal1.problems import Problem
    from cudal1.training.evaluation import evaluator_fn
    from cudal1.training.finetune import load_policy, policy_source, save_policy
    from cudal1.training.rl import run_contrastive_rl

    params = load_params(params_path, "contrastive_rl", overlay)
    rank = int(os.environ.get("LOCAL_RANK", "0"))
    devices = tuple(f"cuda:{rank}" if d.startswith("cuda") else d for d in params.devices[:1])
    check_devices(devices, "contrastive_rl.devices")
    problems = _read_problems(params.problems, Problem)
    model, tokenizer = load_policy(policy_source(params.policy))
    work = Path(params.work_dir) / "launch"
    main = _is_main()
    with evaluator_fn(params.protocol.with_device(devices[0]), devices) as evaluate:
        model, epochs = run_contrastive_rl(
            model, tokenizer, {p.problem_id: p for p in problems}, CandidatePool.load(params.pool),
            evaluate, params, work,
            pool_path=work / "pool.parquet" if main else None, load_model=lambda path: load_policy(path)[0])
    if main:
        save_policy(model, tokenizer, params.out_dir)
    return epochs


def _read_problems(path: str, problem: type) -> list:
    import polars as pl

    return [problem(r["problem_id"], r["level"], r["name"], r["source"], r["suite"])
            for r in pl.read_parquet(path).iter_rows(named=True)]


def main() -> None:
    parser = argparse.ArgumentParser(description="Run a learning stage's training under accelerate launch.")
    parser.add_argument("stage", choices=["sft", "rl"])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--params-overlay", default=None, help="a YAML file merged over the params")
    args = parser.parse_args()
    result = (run_sft if args.stage == "sft" else run_rl)(args.params, args.params_overlay)
    if _is_main():
        print(result)


if __name__ == "__main__":
    main()
