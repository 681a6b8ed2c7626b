"""docs/generate.py: every figure a doc states comes from a results file, and the params and EvalConfig
references come from the code. A committed doc that differs from its regenerated form fails here."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cudal1.config import SECTIONS
from cudal1.evaluator.config import EvalConfig
from cudal1.measured import Table, write_result

ROOT = Path(__file__).resolve().parents[1]


def _module(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "docs" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


generate = _module("generate")
reference_pages = _module("reference_pages")


@pytest.fixture
def results(tmp_path: Path) -> Path:
    root = tmp_path / "results"
    write_result(root / "run-x", title="x", command="python x.py --fast", hardware="2-core CPU", date="2026-12-06",
                 commit="abc1234", figures={"wall_s": 12.345, "passed": 7},
                 tables={"levels": Table(["level", "ok", "mean"], [[1, 3, 1.2345], [2, 0, None]])})
    return root


def test_the_committed_docs_are_their_regenerated_form() -> None:
    done = subprocess.run([sys.executable, "docs/generate.py", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_markers_are_filled_from_the_results_file(results: Path) -> None:
    text = ("It took <!-- fig run-x wall_s {:.1f} s -->99 s<!-- /fig --> and <!-- fig run-x passed -->1<!-- /fig -->"
            " passed (<!-- source run-x -->old<!-- /source -->).\n\n<!-- table run-x levels -->\n| old |\n"
            "<!-- /table -->\n\n```\n<!-- fig run-x nothing -->in a code block: left alone<!-- /fig -->\n```\n")
    out = generate.fill(text, "docs/x.md", results)
    assert "<!-- fig run-x wall_s {:.1f} s -->12.3 s<!-- /fig -->" in out
    assert "<!-- fig run-x passed -->7<!-- /fig -->" in out
    assert "measured 2026-12-06 on 2-core CPU, commit abc1234: `python x.py --fast`" in out
    assert "| level | ok | mean |\n| --- | --- | --- |\n| 1 | 3 | 1.23 |\n| 2 | 0 | - |\n<!-- /table -->" in out
    assert "in a code block: left alone" in out
    assert generate.fill(out, "docs/x.md", results) == out  # a second pass changes nothing


@pytest.mark.parametrize(("marker", "problem"), [
    ("<!-- fig run-y wall_s -->1<!-- /fig -->", "no results file results/run-y/result.json"),
    ("<!-- fig run-x wall_ms -->1<!-- /fig -->", "results/run-x has no figure 'wall_ms' (it has: passed, wall_s)"),
    ("<!-- table run-x rows -->\n|a|\n<!-- /table -->", "results/run-x has no table 'rows' (it has: levels)"),
    ("<!-- default EvalConfig.no_such_field -->1<!-- /default -->", "no field EvalConfig.no_such_field"),
])
def test_a_marker_naming_what_does_not_exist_says_where_and_how_to_fix(results: Path, marker: str,
                                                                          problem: str) -> None:
    with pytest.raises(generate.MarkerError) as caught:
        generate.fill(f"text {marker} text\n", "docs/guides/x.md", results)
    message = str(caught.value)
    assert message.startswith("docs/guides/x.md: " + marker.split("-->")[0] + "-->"), message
    assert problem in message and "Fix:" in message, message


def test_an_unclosed_marker_is_an_error(results: Path) -> None:
    with pytest.raises(generate.MarkerError, match="README.md: the marker on line 2 is not closed"):
        generate.fill("ok\na <!-- fig run-x wall_s -->12 s, never closed\n", "README.md", results)


def test_a_hand_edited_figure_is_caught(tmp_path: Path, results: Path) -> None:
    (tmp_path / "docs").mkdir()
    page = tmp_path / "README.md"
    page.write_text("Wall: <!-- fig run-x wall_s {:.0f} s -->12 s<!-- /fig -->.\n")
    for name, make in generate.REFERENCE_PAGES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(make())
    assert generate.differences(generate.regenerate(tmp_path, results), tmp_path) == ""
    page.write_text("Wall: <!-- fig run-x wall_s {:.0f} s -->10 s<!-- /fig -->.\n")  # edited by hand
    diff = generate.differences(generate.regenerate(tmp_path, results), tmp_path)
    assert "a/README.md" in diff and "-Wall: <!-- fig run-x wall_s {:.0f} s -->10 s" in diff
    assert "+Wall: <!-- fig run-x wall_s {:.0f} s -->12 s" in diff


def _params_keys(klass: type, path: str) -> list[str]:
    """Every key path a params section has, nested dataclasses walked (EvalConfig's fields are its own page)."""
    keys = []
    for field in dataclasses.fields(klass):
        value = reference_pages._default(field)
        kind = reference_pages._nested(klass, field, value)
        key = f"{path}.{field.name}" + ("[]" if kind and kind[0] == "list" else "")
        keys.append(key)
        if kind and kind[1] is not EvalConfig:
            keys += _params_keys(kind[1], key)
    return keys


def test_the_params_reference_lists_every_key() -> None:
    page = (ROOT / "docs" / "reference" / "params.md").read_text()
    listed = set(re.findall(r"^\| `([^`]+)` \|", page, re.M))
    expected = {key for name, klass in SECTIONS.items() for key in _params_keys(klass, name)}
    assert expected <= listed, sorted(expected - listed)
    assert "augment.teachers[].base_url" in listed and "augment.template.variants" in listed


def test_the_evalconfig_reference_lists_every_field_with_its_default() -> None:
    page = (ROOT / "docs" / "reference" / "evalconfig.md").read_text()
    rows = dict(re.findall(r"^\| `(\w+)` \| `[^`]*` \| ([^|]*) \|", page, re.M))
    assert set(rows) == {f.name for f in dataclasses.fields(EvalConfig)}
    assert rows["correctness_trials"].strip() == f"`{EvalConfig().correctness_trials}`"


def test_a_field_is_documented_by_the_comments_above_it_and_on_its_line() -> None:
    doc = reference_pages.field_doc(EvalConfig, "correctness_trials")
    comments = " ".join(line.strip().lstrip("#").strip()
                        for line in (ROOT / "cudal1" / "evaluator" / "config.py").read_text().splitlines())
    assert doc and " ".join(doc.split()) in " ".join(comments.split())
    # a subclass's field keeps the comment of the class that declares it
    from cudal1.training.params import SFTParams
    from cudal1.training.settings import FinetuneSettings
    assert reference_pages.field_doc(SFTParams, "max_length") == reference_pages.field_doc(FinetuneSettings,
                                                                                          "max_length") != ""
