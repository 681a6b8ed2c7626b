"""Stage `sft`: supervised fine-tuning of the policy on the augment corpus through TRL's SFTTrainer
(full or LoRA by params). Each example is a contrastive prompt (reference + exemplars drawn from the
corpus) and a protocol-format response whose program is a corpus program. Loss per step goes to MLflow
and to ``reports/learning/sft_loss.csv`` (a DVC plot)."""

from __future__ import annotations

from pathlib import Path

from prefect import flow, get_run_logger

from cudal1.config import params_dict
from cudal1.reports import plot_series
from cudal1.training.params import SFTParams
from flows._common import main, policy_label, repo_root, run_name, stage_params
from tasks.io import read_problems_task
from tasks.learning import SeriesBuffer, log_series_task, read_corpus_task, sft_task, write_plot_csv
from tasks.registry import log_policy
from tasks.tracking import stage_run


def _describe(p: SFTParams) -> str:
    return f"{'LoRA' if p.lora else 'full'}, {p.epochs:g} epochs, lr {p.learning_rate:g}"


@flow(name="sft", flow_run_name=run_name("sft", _describe))
def sft_flow(params_path: str = "params.yaml") -> dict:
    params: SFTParams = stage_params(params_path, "sft")
    root = repo_root(params_path)
    with stage_run("sft", params_dict(params), root) as run:
        problems = read_problems_task(params.problems)
        corpus = read_corpus_task(params.corpus)
        run.name(problems=len(problems), model=policy_label(params_path))
        sink = SeriesBuffer()
        summary = sft_task(params, problems, corpus, sink)
        series = sink.drain()
        log_series_task(run.run_id, series, str(root))
        losses = [{"step": step} | m for step, m in series if "sft_loss" in m]
        write_plot_csv(losses, params.plots, ["step", "sft_loss", "sft_mean_token_accuracy", "sft_learning_rate"])
        get_run_logger().info(f"sft -> {params.out_dir}: {summary}")
        run.log_metrics(summary)
        png = plot_series(losses, "step", ["sft_loss"], Path(params.plots).with_suffix(".png"), "SFT loss per step")
        run.log_artifacts([params.plots, png], artifact_path="plots")
        log_policy(run, params_dict(params), params.out_dir, summary, [params.problems, params.corpus, params.policy])
    return summary


if __name__ == "__main__":
    main(sft_flow, __doc__)
