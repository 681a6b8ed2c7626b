"""`cudal1 optimize` with a real OpenAI-compatible server (`transformers serve` with the tiny model of
conftest.py's ``tiny_server``): round 1's measured speedups reach round 2's contrastive prompt, and a
model that never writes a program is reported as such."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest

from cudal1.optimize import OptimizeSettings, make_writers, optimize, read_module
from cudal1.optimize.loop import completion_cache
from tests.optimize_helpers import FAST, RING


def _run(tiny_server: dict, module_path: Path, out: Path):
    writers = make_writers([tiny_server["base_url"]], [tiny_server["model"]], api="completions", max_tokens=48,
                           temperature=1.0, request_timeout_s=120, cache=completion_cache(out))
    # patience 2: round 2 is asked even when round 1's rewrites measure no faster than the module, as they
    # can on a CPU shared with other test workers (one CI run stopped after round 1 that way)
    return optimize(read_module(module_path), FAST, writers, OptimizeSettings(rounds=2, samples=2, patience=2), out)


@pytest.mark.slow
def test_round_one_measurements_reach_round_two_prompt_and_a_rerun_asks_and_measures_nothing(
        tiny_server: dict, tmp_path: Path) -> None:
    module_path = tmp_path / "ring.py"
    module_path.write_text(RING)
    out = tmp_path / "out"
    state = _run(tiny_server, module_path, out)
    prompts = [json.loads(line) for line in (out / "prompts.jsonl").read_text().splitlines()]
    from cudal1.optimize.outputs import messages

    assert [(p["round"], p["origin"], p["asked"]) for p in prompts] == [(1, "model:model", 2), (2, "model:model", 2)], \
        (state.stop, messages(state))
    assert state.stop in ("all 2 rounds done", "round 2 brought nothing faster than your module, 2 rounds in a row") \
        or state.stop.startswith("round 2 brought nothing faster than the best so far"), state.stop
    assert "None yet: this is the first attempt" in prompts[0]["prompt"]
    table = pl.read_parquet(out / "candidates.parquet")
    round_one = table.filter((pl.col("round") == 1) & (pl.col("status") == "ok"))
    measured = {f"{s:.2f}" for s in round_one["speedup"]}
    shown = re.findall(r"^## Implementation \d+ \(speedup ([0-9.]+)x\)$", prompts[1]["prompt"], re.MULTILINE)
    assert shown and set(shown) <= measured, (shown, measured)  # round 2 is prompted with round 1's figures
    assert {f"{s:.2f}" for s in prompts[1]["exemplar_speedups"]} == set(shown)
    assert RING.strip() in prompts[1]["prompt"]  # the user's module is the reference
    # The tiny model is untrained: its answers hold no program. Each is kept, none is evaluated.
    answers = table.filter(pl.col("origin") == "model:model")
    assert answers.height >= 2 and set(answers["status"]) == {"malformed"} and set(answers["round"]) == {1, 2}
    assert all(reason.startswith("no program in the answer") for reason in answers["reason"])
    assert any("model:model returned no program in 4 answers" in m for m in messages(state)), messages(state)
    assert "model:model returned no program" in (out / "report.md").read_text()
    # The same run again: every answer comes from the cache, every measurement from the results file.
    again = _run(tiny_server, module_path, out)
    assert again.measured_now == 0 and len(again.reused) == round_one.height
    assert [p["asked"] for p in (json.loads(line) for line in (out / "prompts.jsonl").read_text().splitlines())] == [0, 0]
    assert pl.read_parquet(out / "candidates.parquet")["sha256"].to_list() == table["sha256"].to_list()
