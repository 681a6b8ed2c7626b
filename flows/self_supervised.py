"""Stage `self_supervised` (CUDA-L1 stage 2): R rounds of sampling k candidates per problem from the
current policy, evaluating them, and fine-tuning on the executable and correct ones only. Per round:
success rate, samples, generated tokens (MLflow, ``reports/learning/self_supervised_rounds.csv``); the
samples of each round under ``data/self_supervised/``, each round's policy under ``models/``."""

from __future__ import annotations

from pathlib import Path

from prefect import flow, get_run_logger

from cudal1.config import params_dict
from cudal1.training.params import SelfSupervisedParams
from flows._common import main, policy_label, repo_root, run_name, stage_params
from tasks.io import read_problems_task
from tasks.learning import (
    SeriesBuffer,
    log_series_task,
    read_corpus_task,
    self_supervised_task,
    write_plot_csv,
)
from tasks.registry import log_policy
from tasks.tracking import stage_run

COLUMNS = ["round", "samples", "correct", "success_rate", "problems_solved", "new_correct", "pool_correct",
           "generated_tokens", "evaluated", "finetune_last_loss"]


def _describe(p: SelfSupervisedParams) -> str:
    return f"{p.rounds} rounds x {p.sampling.samples} samples per problem on {', '.join(p.devices)}"


@flow(name="self_supervised", flow_run_name=run_name("self_supervised", _describe))
def self_supervised_flow(params_path: str = "params.yaml") -> list:
    params: SelfSupervisedParams = stage_params(params_path, "self_supervised")
    root = repo_root(params_path)
    with stage_run("self_supervised", params_dict(params), root) as run:
        problems = read_problems_task(params.problems)
        corpus = read_corpus_task(params.corpus)
        run.name(problems=len(problems), model=policy_label(params_path))
        sink = SeriesBuffer()
        rounds = self_supervised_task(params, problems, corpus, sink)
        log_series_task(run.run_id, sink.drain(), str(root))
        write_plot_csv(rounds, params.plots, COLUMNS)
        for r in rounds:
            get_run_logger().info(f"round {r['round']}: {r['correct']}/{r['samples']} correct, "
                                  f"{r['problems_solved']} problems solved, {r['evaluated']} evaluated, "
                                  f"{r['new_correct']} new correct programs (pool: {r['pool_correct']})")
        # Each round's figures are series in the run (ssl_round_success_rate, ssl_round_new_correct... by
        # round, logged by the core's sink); these are the last round's, for comparing runs.
        last = {"last_round_success_rate": rounds[-1]["success_rate"],
                "last_round_problems_solved": rounds[-1]["problems_solved"],
                "corpus_growth": sum(r["new_correct"] for r in rounds)} if rounds else {}
        run.log_metrics(last)
        run.log_artifacts([params.plots], artifact_path="tables")
        run.log_artifacts(sorted(Path(params.data_dir).glob("samples-round-*.parquet")), artifact_path="tables")
        log_policy(run, params_dict(params), params.out_dir, last, [params.problems, params.corpus, params.policy])
    return rounds


if __name__ == "__main__":
    main(self_supervised_flow, __doc__)
