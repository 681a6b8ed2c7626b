"""One RL epoch's generation (every problem's contrastive prompt, G samples each, as GRPOTrainer batches
them) with transformers' default key/value cache and with a static one (backends.cpu_cache), on the
pipeline's own policy and pool: seconds, new tokens, milliseconds a decode step, and the prefill alone.

    .venv/bin/python benchmarks/generation_cache.py            # after `make run`, from the repository root
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--policy", default="models/self_supervised")
    parser.add_argument("--caches", default="dynamic,static")
    args = parser.parse_args()
    import torch

    from cudal1.config import load_params
    from cudal1.pool import CandidatePool
    from cudal1.training.finetune import load_policy
    from cudal1.training.rl import epoch_prompts
    from tasks.io import read_problems_task

    params = load_params(args.params, "contrastive_rl")
    problems = {p.problem_id: p for p in read_problems_task.fn(params.problems)}
    rows = epoch_prompts(problems, CandidatePool.load(params.pool), params, 0)
    model, tokenizer = load_policy(args.policy)
    tokenizer.padding_side = "left"
    enc = tokenizer([r["prompt"] for r in rows for _ in range(params.num_generations)], return_tensors="pt",
                    padding=True)
    with torch.inference_mode():
        started = time.perf_counter()
        model(**enc)
        prefill_s = time.perf_counter() - started
    report = {"sequences": enc.input_ids.shape[0], "prompt_tokens": enc.input_ids.shape[1],
              "prefill_s": round(prefill_s, 2), "threads": torch.get_num_threads()}
    for cache in args.caches.split(","):
        torch.manual_seed(0)
        started = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(**enc, do_sample=True, temperature=params.temperature, top_k=0,
                                 max_new_tokens=params.max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                                 cache_implementation=cache)
        seconds = time.perf_counter() - started
        new = out.shape[1] - enc.input_ids.shape[1]
        report[cache] = {"s": round(seconds, 2), "new_tokens": new,
                         "decode_ms_per_token": round((seconds - prefill_s) / max(new, 1) * 1e3, 1)}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
