"""docs/gpu-runs.md is the record every GPU figure in the docs points to: each run has an anchor and a row in
the table at its top, and every link to a run names one that exists. Two runs once went in without either
(a heading written as the id itself, no table row), while three docs linked to one of them."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "docs" / "gpu-runs.md"
ANCHOR = re.compile(r'<a id="([^"]+)"></a>')
ROW = re.compile(r"^\| \[([^\]]+)\]\(#\1\) \|", re.MULTILINE)
LINK = re.compile(r"gpu-runs\.md#([0-9a-z-]+)")
# Within a page that links to the runs, "#2026-11-29-healed-release" alone means a run too.
SHORT = re.compile(r"(?<![\w/.-])#(20\d\d-\d\d-\d\d-[0-9a-z-]+)")


def _pages() -> list[Path]:
    return sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]


def test_every_run_has_an_anchor_a_row_and_a_dated_heading() -> None:
    text = RUNS.read_text(encoding="utf-8")
    anchors, rows = ANCHOR.findall(text), ROW.findall(text)
    assert len(anchors) == len(set(anchors)), "an anchor given twice"
    assert set(anchors) == set(rows), (f"runs without a table row: {sorted(set(anchors) - set(rows))}; "
                                       f"rows without a run: {sorted(set(rows) - set(anchors))}")
    for match in ANCHOR.finditer(text):
        heading = text[match.end():].lstrip("\n").split("\n", 1)[0]
        assert re.match(rf"##+ {match.group(1)[:10]} · ", heading), (match.group(1), heading)


def test_every_link_to_a_run_names_one_that_exists() -> None:
    anchors = set(ANCHOR.findall(RUNS.read_text(encoding="utf-8")))
    missing = []
    for page in _pages():
        text = page.read_text(encoding="utf-8")
        ids = set(LINK.findall(text))
        if page == RUNS or "gpu-runs.md" in text:
            ids |= set(SHORT.findall(text))
        missing += [f"{page.relative_to(ROOT)}: #{i}" for i in sorted(ids - anchors)]
    assert not missing, missing
