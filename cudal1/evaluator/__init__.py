"""The evaluator: static checks -> isolated build/load -> correctness -> timing -> verdict.

Public API:
    evaluate_candidate(problem, candidate, config) -> Evaluation
    evaluate_many(problems, candidates, config, devices=..., results_path=..., progress=...) -> list[Evaluation]

Modules, in reading order (the records themselves, Evaluation and its files, are cudal1/candidates.py):

    config        EvalConfig: the protocol's settings, each documented for a user, and the config hash
  static checks
    static        the source's static checks: refused constructs, flags (reads the clock, tunes itself)
    bindings      why a program's load_inline extension cannot build, read from its source
  builds
    extensions    hooks around torch's extension builder inside a worker (counted, failures remembered)
    toolchain     the fail-fast ninja, ninja's damaged deps logs, the precompiled torch header
    builds        a batch's builds in throwaway workers, paused while a device times (Quiet)
  worker processes (the parent's side)
    process       WorkerProcess: spawn, private pipes, bounded calls, kill; each worker's environment
    forking       the parent's side of the fork server workers are forked from
    sandbox       fresh uids and shared build folders, the host's process table, cores, reaping
    workers       where workers live, their spec, a candidate's prepared worker, what reaches the parent
    references    a reference's lifetime: its session, references kept between batches, closes
  the worker (the child's side: torch and the standard library only)
    zygote        the fork server: torch imported once, a worker forked per request
    worker_main   the worker process: limits, pinning, the command loop on private pipes
    worker        Worker: one program's commands (load, run, warm, time, reference) and identity checks
    inputs        a timed call's inputs: the replay plan, its captured graph, the load's preparation
    device_draws  the harness's own draw kernels (draws.cu), compiled with nvcc where it is there
    probes        checks of the program inside the worker: global state, precision, outputs, L2 flush
    fingerprints  per-call output fingerprints of the timed calls
    transport     how tensors reach the parent: exported device memory, or files on a CPU
    clock_skew    clocks that decide a self-timing program's race, in a confirmation only
  correctness
    checks        Run (one evaluation in progress), Verdict, the checks every reply goes through
    compare       output comparison in the parent: tolerances, relative L2, fingerprints
    core          evaluate_candidate: load, correctness trials, timing, verdict
  timing
    timed         a worker's timed batch, the host's pace around it, the wait for an idle device
    trials        paired trials in random order, calibration, the wall-clock check, idle work
    timing        statistics of the trials, and contended trials set aside
  scheduling
    recheck       what follows a first measurement: CUDA-L1's re-check, confirmations, harness failures
    schedule      which problem a device takes next, the workers loaded ahead, the quiet to time in
    batch         evaluate_many: builds beside the devices' loops, results kept as they finish
"""

from cudal1.evaluator.config import EvalConfig

__all__ = ["EvalConfig", "evaluate_candidate", "evaluate_many"]


def __getattr__(name: str):  # lazy: importing the config must not start anything heavy
    if name == "evaluate_candidate":
        from cudal1.evaluator.core import evaluate_candidate

        return evaluate_candidate
    if name == "evaluate_many":
        from cudal1.evaluator.batch import evaluate_many

        return evaluate_many
    raise AttributeError(name)
