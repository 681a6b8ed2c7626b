"""CUDA-L1's method at inference time, on one program: rounds of candidates, each measured with the full
evaluator protocol, later rounds prompted with the best measured ones (contrastive exemplars).

Round 1 holds the template teacher's rewrites and ``samples`` answers from each configured model; each
later round asks every model again with a contrastive prompt whose exemplars (drawn by score bucket from
the candidates measured so far, as in contrastive RL) carry their measured speedups. The run stops after
``rounds`` rounds, when the time budget is spent, or after ``patience`` rounds in a row that brought
nothing faster (model answers vary, so a later round can find what an earlier one did not).

Resuming is replay: the same command rebuilds every round from the same inputs; model answers come back
from the completion cache and measurements from the evaluator's results file, so nothing is asked or
measured twice and the run goes on where it stopped.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Sequence
from pathlib import Path

from cudal1.candidates import Candidate, Evaluation, load_evaluations
from cudal1.evaluator.config import EvalConfig
from cudal1.evaluator.workers import device_name
from cudal1.generation.augment import CompletionCache
from cudal1.generation.templates import template_candidates
from cudal1.optimize.models import CachedWriter, ModelFailure
from cudal1.optimize.module import UserModule, check_module
from cudal1.optimize.outputs import write_outputs
from cudal1.optimize.state import (
    NO_MODEL_HINT,
    Entry,
    OptimizeSettings,
    RunState,
    rank_key,
)
from cudal1.pool import PoolEntry
from cudal1.prompts import build_prompt, parse_response


# The reference unchanged ("baseline") is no candidate for a user: it would only repeat their module.
class OptimizeInterrupted(KeyboardInterrupt):
    """Ctrl-C: the outputs were written from every finished evaluation; ``state`` says how far it got."""

    def __init__(self, state: RunState) -> None:
        super().__init__("interrupted")
        self.state = state


def optimize(module: UserModule, config: EvalConfig, writers: Sequence[CachedWriter], settings: OptimizeSettings,
             out_dir: str | Path, *, command: str = "", log: Callable[[str], None] = lambda _: None,
             progress: Callable[[Evaluation], None] | None = None) -> RunState:
    """Run the rounds, writing ``out_dir``'s outputs after each. Raises ModuleProblem or ModelFailure before
    any work when the module or a model cannot be used; OptimizeInterrupted on Ctrl-C (outputs written)."""

    out_dir = Path(out_dir)
    seconds = check_module(module, config)
    log(f"{module.path}: {module.model_class} builds and runs on {config.device} "
        f"({seconds * 1e3:.0f} ms for its first forward with its inputs)")
    for writer in writers:
        warning = writer.check()
        if warning:
            log(f"warning: {warning}")
    out_dir.mkdir(parents=True, exist_ok=True)  # only once the module and the models can be used
    state = RunState(module, config, list(writers), settings, out_dir, command)
    state.evaluations = _measured(state)
    if not writers:
        state.messages.append(NO_MODEL_HINT)
    try:
        _rounds(state, log, progress)
    except KeyboardInterrupt as exc:
        state.interrupted, state.stop = True, f"interrupted during round {state.rounds_done + 1}"
        write_outputs(state)
        raise OptimizeInterrupted(state) from exc
    write_outputs(state)
    return state


def _measured(state: RunState) -> dict[str, Evaluation]:
    """Earlier runs' measurements of this module under this protocol on this hardware, by candidate sha."""
    problem, config = state.module.problem, state.config
    name = device_name(config.device)
    return {e.candidate_sha256: e for e in load_evaluations(state.results_path)
            if e.problem_sha256 == problem.sha256 and e.config_hash == config.hash and e.device_name == name}


def _rounds(state: RunState, log: Callable[[str], None], progress: Callable[[Evaluation], None] | None) -> None:

    settings, best, stale = state.settings, 1.0, 0  # to beat: the user's own module
    for r in range(1, settings.rounds + 1):
        if state.spent():
            state.stop = f"the time budget ({settings.budget_s:g} s) was spent before round {r}"
            return
        if r > 1 and not state.writers:
            state.stop = f"round {r} needs a model to write it, and none is configured"
            return
        new: list[Entry] = []
        if r == 1:
            gpu = state.config.is_cuda
            new += [Entry(c, 1) for c in template_candidates(state.module.problem, settings.variants,
                                                                settings.compile_modes, gpu)]
        new += _sample(state, r, log)
        _evaluate(state, new, log, progress)
        state.rounds_done = r
        write_outputs(state)
        top = max((rank_key(state.evaluations.get(s)) for s, e in state.entries.items() if e.round == r),
                  default=float("-inf"))
        log(f"round {r}: {sum(e.round == r for e in state.entries.values())} candidates; "
            + (f"best lower bound {top:.2f}x" if top > float("-inf") else "none passed"))
        if state.failure:
            state.stop = f"a model failed in round {r} (see the messages); rerun the same command to go on"
            return
        if state.budget_hit:
            state.stop = f"the time budget ({settings.budget_s:g} s) ran out during round {r}"
            return
        if top > best:
            best, stale = top, 0
            continue
        stale += 1
        if stale >= settings.patience:
            state.stop = (f"round {r} brought nothing faster than "
                          + ("your module" if best == 1.0 else f"the best so far ({best:.2f}x lower bound)")
                          + (f", {stale} rounds in a row" if stale > 1 else ""))
            return
    state.stop = f"all {settings.rounds} rounds done"


def _rng(state: RunState, round_: int, origin: str) -> random.Random:
    """One generator per (round, model): a resumed run draws the same exemplars, hence the same prompt."""
    key = f"{state.settings.seed}:{round_}:{origin}:{state.module.problem.sha256}"
    return random.Random(int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big"))


def _sample(state: RunState, round_: int, log: Callable[[str], None]) -> list[Entry]:
    """Each model's answers to this round's prompt; a model that fails is dropped (and ends the run)."""
    pid, p = state.module.problem.problem_id, state.settings.prompts
    out: list[Entry] = []
    for writer in list(state.writers):
        exemplars = state.pool.sample_exemplars(pid, _rng(state, round_, writer.origin), p.exemplars,
                                                p.bucket_width, p.temperature)
        prompt = build_prompt(state.module.problem.source, exemplars)
        try:
            texts, asked = writer.answers(prompt, state.settings.samples)
        except Exception as exc:  # noqa: BLE001 - ModelFailure, or a local policy's own error
            message = str(exc) if isinstance(exc, ModelFailure) else f"{writer.origin}: {type(exc).__name__}: {exc}"
            state.failure = message
            state.messages.append(f"round {round_}: {message}. What was measured is kept; fix it and rerun")
            state.writers.remove(writer)
            log(f"error: {message}")
            continue
        state.prompts.append({"round": round_, "origin": writer.origin, "prompt": prompt, "asked": asked,
                              # unrounded: the prompt shows each at two decimals, and a 4-place
                              # round first can land on the other side of a tie (1.62501 -> 1.625 -> "1.62")
                              "exemplar_speedups": [e.speedup for e in exemplars]})
        counts = state.replies.setdefault(writer.origin, [0, 0])
        for text in texts:
            parsed = parse_response(text)
            counts[0] += 1
            if parsed.ok and parsed.code is not None:
                counts[1] += 1
                out.append(Entry(Candidate(pid, parsed.code, writer.origin), round_))
            else:
                why = "; ".join(parsed.errors) or "no program"
                out.append(Entry(Candidate(pid, text, writer.origin), round_, malformed=why))
        log(f"round {round_}: {writer.origin} answered {len(texts)} times ({asked} asked now, "
            f"{len(texts) - asked} from the cache), {sum(not e.malformed for e in out[-len(texts):])} with a program")
    return out


def _evaluate(state: RunState, new: list[Entry], log: Callable[[str], None],
              progress: Callable[[Evaluation], None] | None) -> None:
    """Evaluate the round's new candidates in batches; one already measured (now or by an earlier run) is
    not measured again; no batch starts once the budget is spent."""
    from cudal1.evaluator import evaluate_many

    todo: list[Candidate] = []
    for entry in new:
        sha = entry.candidate.sha256
        if sha in state.entries:
            continue  # written again (by another model, or in a later round): measured once
        state.entries[sha] = entry
        if entry.malformed:
            continue
        if sha in state.evaluations:
            state.reused.add(sha)
        else:
            todo.append(entry.candidate)
    chunk = state.settings.chunk
    for start in range(0, len(todo), chunk):
        if state.spent():
            state.budget_hit = True
            log(f"time budget spent: {len(todo) - start} candidates left unmeasured (rerun to measure them)")
            break
        batch = todo[start:start + chunk]
        for e in evaluate_many([state.module.problem], batch, state.config, results_path=state.results_path,
                               progress=progress):
            state.evaluations[e.candidate_sha256] = e
            state.measured_now += 1
    for entry in new:
        e = state.evaluations.get(entry.candidate.sha256)
        if e is not None and e.ok:
            state.pool.add(PoolEntry.from_evaluation(entry.candidate, e, stage="optimize"))
    failed = [e for e in state.evaluations.values() if e.harness_failed]
    if failed:
        note = f"{len(failed)} evaluation(s) failed in the harness, not the candidate: {failed[0].reason[:300]}"
        if note not in state.messages:
            state.messages.append(note)


def completion_cache(out_dir: str | Path) -> CompletionCache:
    return CompletionCache(Path(out_dir) / "completions.jsonl")
