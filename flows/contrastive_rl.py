"""Stage `contrastive_rl` (CUDA-L1 stage 3): E epochs of GRPO through TRL's GRPOTrainer. Prompts carry
exemplars from the candidate pool with their measured speedups; the reward evaluates every completion
(speedup normalised within its group, clipped to [-k, k]; failures get a fixed low reward) and adds it
to the pool. Per epoch: mean/max reward, success rate, mean/median speedup (MLflow steps and
``reports/rl_epochs.csv``). A rerun with the same settings, policy and pool resumes after the last
finished epoch and never re-evaluates a program the pool already holds."""

from __future__ import annotations

from pathlib import Path

from prefect import flow, get_run_logger

from cudal1.config import params_dict
from cudal1.reports import plot_series
from cudal1.training.params import ContrastiveRLParams
from flows._common import main, policy_label, repo_root, run_name, stage_params
from tasks.io import read_problems_task
from tasks.learning import contrastive_rl_task, last_epoch_metrics, write_metrics_task, write_plot_csv
from tasks.registry import REGISTRATION, log_policy, register_policy_task, write_registration
from tasks.tracking import stage_run

COLUMNS = ["epoch", "mean_reward", "max_reward", "success_rate", "mean_speedup", "median_speedup", "max_speedup",
           "well_formed_rate", "cached_rate", "harness_failed_rate", "evaluated", "pool_correct", "pool_best_speedup",
           "epoch_seconds"]


def _describe(p: ContrastiveRLParams) -> str:
    return f"{p.epochs} epochs, G={p.num_generations}, k={p.clip:g} on {', '.join(p.devices)}"


@flow(name="contrastive_rl", flow_run_name=run_name("contrastive_rl", _describe))
def contrastive_rl_flow(params_path: str = "params.yaml") -> list:
    params: ContrastiveRLParams = stage_params(params_path, "contrastive_rl")
    root = repo_root(params_path)
    with stage_run("contrastive_rl", params_dict(params), root) as run:
        problems = read_problems_task(params.problems)
        run.name(problems=len(problems), model=policy_label(params_path))
        epochs = contrastive_rl_task(params, problems, run.run_id, str(root))
        write_plot_csv(epochs, params.plots, COLUMNS)
        for e in epochs:
            get_run_logger().info(f"epoch {int(e['epoch'])}: mean reward {e['mean_reward']:.3f}, success "
                                  f"{e['success_rate']:.2f}, median speedup {e['median_speedup']:.3f}")
        last = last_epoch_metrics(epochs)
        write_metrics_task(last, params.metrics)
        if epochs:
            run.log_metrics({"first_epoch_mean_reward": epochs[0]["mean_reward"],
                             "last_epoch_mean_reward": epochs[-1]["mean_reward"]})
        png = plot_series(epochs, "epoch", ["mean_reward", "success_rate", "median_speedup"],
                          Path(params.plots).with_suffix(".png"), "Contrastive RL per epoch")
        data = Path(params.data_dir)
        run.log_artifacts([params.plots, png, params.metrics], artifact_path="plots")
        run.log_artifacts([data / "candidates.parquet", data / "pool.parquet"], artifact_path="tables")
        uri = log_policy(run, params_dict(params), params.out_dir, last,
                         [params.problems, params.pool, params.policy])
        if uri is not None:
            version = register_policy_task(uri, params.registered_model, str(root), {"stage": "contrastive_rl"})
            write_registration(data / REGISTRATION, params.registered_model, version, uri)
            run.set_tags({"registered_model": params.registered_model, "registered_version": version})
            get_run_logger().info(f"policy registered as {params.registered_model} version {version}")
    return epochs


if __name__ == "__main__":
    main(contrastive_rl_flow, __doc__)
