"""Bad params stop the pipeline with a message that names the key and the fix, before DVC touches any
output; and the params loader's checks, one by one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pipeline_helpers import REPO, edit_params, free_port, run_pipeline

from cudal1.config import SECTIONS, AugmentParams, ParamsError, load_params

OUTPUTS = ("data/problems/problems.parquet", "data/augment/candidates.parquet", "data/augment/corpus.parquet",
           "data/evaluate/evaluations.parquet", "reports/metrics.json")

BAD = {
    "unknown key": ({"augment": {"templat": {"enabled": True}}},
                    ["augment.templat: unknown key in section 'augment'", "valid keys: problems, out_dir, template"]),
    "wrong type": ({"report": {"threshold": "high"}},
                   ["report.threshold: expected float, got 'high' (str)"]),
    "missing suite path": ({"problems": {"suites": [{"kind": "folder", "path": "my-suites/missing"}]}},
                           ["problems.suites[0].path:", "my-suites/missing does not exist", "or remove that suite"]),
    "unreachable endpoint": ({"augment": {"teachers": [{"name": "down", "base_url": "http://127.0.0.1:{port}/v1",
                                                        "model": "tiny", "api": "completions"}]}},
                             ["augment.teachers[0].base_url: cannot reach http://127.0.0.1:",
                              "Start the server, correct base_url, or remove this teacher"]),
}


@pytest.mark.parametrize("case", list(BAD))
@pytest.mark.slow
def test_bad_params_stop_the_pipeline_and_keep_every_output(case, pipeline_repo, run_env):
    repo: Path = pipeline_repo["repo"]
    assert pipeline_repo["result"].returncode == 0
    changes, expected = BAD[case]
    changes = json.loads(json.dumps(changes).replace("{port}", str(free_port())))
    original = (repo / "params.yaml").read_text()
    before = {out: (repo / out).read_bytes() for out in OUTPUTS}
    try:
        edit_params(repo, changes)
        result = run_pipeline(repo, run_env, timeout=300)
    finally:
        (repo / "params.yaml").write_text(original)
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert last.startswith("error: ")
    for text in expected:
        assert text in last, last
    assert "Running stage" not in result.stdout  # stopped before DVC removed a single output
    assert {out: (repo / out).read_bytes() for out in OUTPUTS} == before


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(text)
    return path


def test_the_repository_params_load_into_their_dataclasses():
    for section in SECTIONS:
        params = load_params(REPO / "params.yaml", section)
        assert isinstance(params, SECTIONS[section])
    augment: AugmentParams = load_params(REPO / "params.yaml", "augment")
    assert augment.protocol.timing_trials == 7 and augment.devices == ("cpu",)
    assert Path(augment.problems).is_absolute()  # relative to the params file, whatever the cwd


def test_every_stage_path_is_resolved_once_against_the_params_folder(tmp_path: Path) -> None:
    """load_params is the one place paths are resolved: flows and tasks use them as they come, in every
    stage (the learning stages' policy, pool, work_dir... included)."""
    import dataclasses

    path = tmp_path / "params.yaml"
    path.write_text("{}\n")
    checked = set()
    for section in SECTIONS:
        params = load_params(path, section)
        for f in dataclasses.fields(params):
            if isinstance(f.default, str) and "/" in f.default:  # a default path such as data/...parquet
                assert getattr(params, f.name) == str(tmp_path / f.default), f"{section}.{f.name}"
                checked.add(f.name)
    assert {"policy", "pool", "corpus", "data_dir", "work_dir", "pool_cache", "plots"} <= checked


@pytest.mark.parametrize("text, message", [
    ("augment:\n  protocol:\n    timing_trails: 3\n",
     "augment.protocol.timing_trails: unknown key in section 'augment.protocol'; valid keys: device, "),
    ("augment:\n  teachers:\n    - {name: a, base_url: 'http://x/v1', model: m, temperature: hot}\n",
     "augment.teachers[0].temperature: expected float, got 'hot' (str)"),
    ("augment:\n  teachers:\n    - {name: a, model: m}\n", "augment.teachers[0]: missing required key(s) base_url"),
    ("augment:\n  template:\n    variants: [baseline, fastest]\n",
     "augment.template.variants[1]: expected one of 'baseline', 'no_grad'"),
    ("augment:\n  devices: cpu\n", "augment.devices: expected a list of str, got 'cpu' (str)"),
    ("augment:\n  protocol:\n    timing_trials: 0\n", "augment.protocol: timing_trials=0: must be at least 1"),
    ("problems:\n  limit: 2.5\n", "problems.limit: expected int or null, got 2.5 (float)"),
    ("problems:\n  suites:\n    - {kind: kernelbench_jsonl}\n", "problems.suites[0]: kind='kernelbench_jsonl' needs `path:`"),
    ("report: [1, 2]\n", "report: expected a mapping with keys problems, candidates"),
])
def test_params_errors_name_the_key_and_the_fix(tmp_path, text, message):
    section = text.split(":")[0]
    with pytest.raises(ParamsError) as caught:
        load_params(_write(tmp_path, text), section)
    assert message in str(caught.value)


def test_a_missing_section_gives_the_defaults_and_paths_resolve_against_the_file(tmp_path):
    params = load_params(_write(tmp_path, "problems:\n  limit: 2\n"), "report")
    assert params.threshold == 1.01 and params.out_dir == str(tmp_path / "reports")
    (tmp_path / "kb.jsonl").write_text("")
    found = load_params(_write(tmp_path, "problems:\n  suites:\n    - {kind: kernelbench_jsonl, path: kb.jsonl}\n"),
                        "problems")
    assert found.suites[0].path == str(tmp_path / "kb.jsonl")
    with pytest.raises(ParamsError, match="unknown params section 'polcy'"):
        load_params(tmp_path / "params.yaml", "polcy")
