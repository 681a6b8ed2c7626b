"""The tracked text speaks of the project (what it does, what was measured), never of how the work on
it was organised: no numbered stretches of work, no time or GPU allowances, no names of the tooling through
which GPU machines were obtained.

The words are assembled from pieces below so that this file does not trip its own check.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SESSION = "sess" + "ion"

# Forbidden in every tracked text file.
EVERYWHERE = re.compile(
    "|".join([
        rf"\b{SESSION}s?\s+[0-9]",                   # a numbered stretch of work
        r"\bbudget" + r"_left",                      # an allowance read from the machine lender
        r"\bdevice\s+to" + r"ol\b",
        r"\bwork" + r"place\b",
        r"\bwork\s+peri" + r"ods?\b",
        r"\bhelper\s+ag" + r"ents?\b",
    ]),
    re.IGNORECASE,
)

# Forbidden in the docs (docs/, README.md) as well: the word without a number, time
# allowances, and the machines' lending. Technical uses are allowed by ALLOWED, kept tiny on purpose.
IN_DOCS = re.compile(
    "|".join([
        rf"\b{SESSION}s?\b",
        r"\bbudgets?\b",
        r"\bdevice\s+mach" + r"ines?\b",
        r"\bno\s+h100\s+was\s+fr" + r"ee\b",
        r"\ble" + r"nt\b",
        r"\blea" + r"se[sd]?\b",
    ]),
    re.IGNORECASE,
)
ALLOWED = re.compile(
    rf"\bown\s+{SESSION}\b"          # a worker started with setsid(): its own process session
    rf"|\b{SESSION}\s+leader\b"      # the process that leads such a session
    rf"|scope\s*=\s*[\"']{SESSION}[\"']|\b{SESSION}[- ]scoped?\b"  # pytest's fixture scope
    r"|--budget-s\b|\bbudget_s\b",  # cudal1 optimize's time limit, a user's option
    re.IGNORECASE,
)

SKIPPED = ("tests/fixtures/",)


def tracked_text_files() -> list[tuple[str, str]]:
    """(path, text) of every tracked file that decodes as UTF-8 text, fixtures left out."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: no tracked files to read")
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=False)
    if listed.returncode != 0:
        pytest.skip(f"git ls-files failed: {listed.stderr.decode(errors='replace').strip()}")
    files = []
    for name in listed.stdout.decode().split("\0"):
        path = ROOT / name
        if not name or name.startswith(SKIPPED) or not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            continue  # binary
        try:
            files.append((name, data.decode("utf-8")))
        except UnicodeDecodeError:
            continue
    return files


def is_doc(name: str) -> bool:
    return name == "README.md" or (name.startswith("docs/") and name.endswith(".md"))


def offending_lines(name: str, text: str) -> list[str]:
    """'path:line: text' for each line that uses the forbidden wording."""
    found = []
    for lineno, line in enumerate(text.splitlines(), 1):
        bad = EVERYWHERE.search(line)
        if bad is None and is_doc(name):
            bad = IN_DOCS.search(ALLOWED.sub("", line))
        if bad is not None:
            found.append(f"{name}:{lineno}: {line.strip()[:160]}")
    return found


def test_the_patterns_catch_what_they_should_and_allow_what_they_should() -> None:
    numbered = f"measured in {SESSION.title()} 5"
    assert offending_lines("cudal1/x.py", numbered)
    assert offending_lines("docs/x.md", f"as in the last {SESSION}")
    assert offending_lines("docs/x.md", "budget" + "_left_s: 32")
    assert not offending_lines("cudal1/x.py", f"one fixture per test {SESSION}")  # pytest's, in code
    assert not offending_lines("README.md", f"in its own {SESSION} and process group")
    assert not offending_lines("docs/x.md", f'servers started once, `scope="{SESSION}"` ({SESSION}-scoped fixtures)')
    assert not offending_lines("docs/x.md", "the release kernels")
    assert not offending_lines("README.md", "stops when `--budget-s S` is spent")


def test_tracked_text_speaks_of_the_project_only() -> None:
    files = tracked_text_files()
    assert any(name == "README.md" for name, _ in files)
    found = [line for name, text in files for line in offending_lines(name, text)]
    assert not found, "wording about how the work was organised:\n" + "\n".join(found)


# ---- the docs' layout: links that resolve, no citation of the removed run records, figures only from results

RECORDS = re.compile(r"docs/" + r"gpu-runs\.md|docs/" + r"benchmarks/")
PINNED = re.compile(r"\s+at\s+[0-9a-f]{7,40}\b")  # "PATH at COMMIT": a record in git history, not in the tree
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCED = re.compile(r"^```.*?^```[^\n]*$", re.M | re.S)
SPANS = re.compile(r"<!-- (fig|table|source|default) .*?<!-- /\1 -->", re.S)
FIGURE = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?\s*(?:s|ms|us|µs|min|x|×|%)(?![\w])")
# Settings and examples a user reads in prose, not measurements: the protocol's interval, CUDA-L1's counts.
FIGURE_ALLOWED = {"95%"}


def doc_pages() -> list[Path]:
    return [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))


def cited_records(name: str, text: str) -> list[str]:
    """'path:line: text' where a line names a removed run record other than as a pinned commit's file."""
    found = []
    for lineno, line in enumerate(text.splitlines(), 1):
        for match in RECORDS.finditer(line):
            rest = line[match.end():]
            path_end = re.match(r"[^\s,;)\"'`]*", rest).end()
            if not PINNED.match(rest[path_end:]):
                found.append(f"{name}:{lineno}: {line.strip()[:140]}")
                break
    return found


def unmarked_figures(text: str) -> list[str]:
    """Measured-looking figures in prose outside the generated spans, fenced code and inline code."""
    prose = FENCED.sub("", SPANS.sub("", text))
    prose = re.sub(r"`[^`\n]*`", "", prose)
    return [m.group(0) for m in FIGURE.finditer(prose) if m.group(0) not in FIGURE_ALLOWED]


def test_the_layout_checks_catch_what_they_should() -> None:
    gone = "docs/" + "gpu-runs.md"
    assert cited_records("cudal1/x.py", f"# measured, {gone}#2026-11-29-x")
    assert not cited_records("docs/learned.md", f"evidence: {gone} at 88f971b, section x")
    assert unmarked_figures("It took 12.5 s and ran 3× faster, 40% of it timing.") == ["12.5 s", "3×", "40%"]
    assert not unmarked_figures("Took <!-- fig r k {} s -->12 s<!-- /fig -->; `--rounds 3`; L1-13; 95% interval.")
    assert not unmarked_figures("```\nmake test  # 10 min\n```\nPython 3.10, 2 GPUs, 1e-2")


def test_every_relative_link_in_the_docs_resolves() -> None:
    broken = []
    for page in doc_pages():
        text = FENCED.sub("", page.read_text(encoding="utf-8"))
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            if not (page.parent / target.split("#", 1)[0]).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, "links to nothing:\n" + "\n".join(broken)


def test_no_tracked_text_cites_the_removed_run_records() -> None:
    found = [line for name, text in tracked_text_files() for line in cited_records(name, text)
             if name != "tests/test_docs_hygiene.py"]
    assert not found, ("the run records are gone: say the reason in a few words, or point at docs/learned.md "
                       "(or cite the record as 'PATH at COMMIT'):\n" + "\n".join(found))


def test_figures_in_the_readme_and_guides_come_from_results() -> None:
    found = {}
    for page in [ROOT / "README.md", *sorted((ROOT / "docs" / "guides").glob("*.md"))]:
        figures = unmarked_figures(page.read_text(encoding="utf-8"))
        if figures:
            found[str(page.relative_to(ROOT))] = figures
    assert not found, ("figures outside generated spans (quote a results file: <!-- fig NAME KEY FORMAT -->, "
                       f"docs/generate.py): {found}")


def test_the_docs_stay_short() -> None:
    listed = subprocess.run(["git", "ls-files", "docs/*.md"], cwd=ROOT, capture_output=True, text=True, check=False)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    lines = sum(len((ROOT / name).read_text(encoding="utf-8").splitlines()) for name in listed.stdout.split())
    assert lines < 3500, f"docs/*.md hold {lines} lines: a newcomer reads them; fold or cut"
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 160


EVIDENCE = re.compile(r"(?P<path>[\w./-]+) at (?P<commit>[0-9a-f]{7,40}), section (?P<section>\"[^\"]+\"|[\w.-]+)")


def test_every_learned_item_names_evidence_that_exists() -> None:
    text = (ROOT / "docs" / "learned.md").read_text(encoding="utf-8")
    items = [i for i in re.split(r"\n(?=- \*\*)", text) if i.startswith("- **")]
    assert len(items) >= 20
    missing = []
    for item in items:
        cited = item.split("evidence:", 1)[1] if "evidence:" in item else ""
        if not cited:
            missing.append(f"no evidence: {item[:80]}")
        for part in (p.strip() for p in cited.split(";")):
            match = EVIDENCE.match(part)
            if part.startswith("results/"):
                if not (ROOT / part.split()[0] / "result.json").is_file():
                    missing.append(f"no results file: {part}")
            elif match is None:
                missing.append(f"not a citation ('PATH at COMMIT, section S' or 'results/NAME'): {part}")
            else:
                missing += _missing_in_history(match)
    assert not missing, "\n".join(missing)


def _missing_in_history(match: re.Match[str]) -> list[str]:
    shown = subprocess.run(["git", "show", f"{match['commit']}:{match['path']}"], cwd=ROOT, capture_output=True,
                           text=True, check=False)
    if shown.returncode != 0:
        known = subprocess.run(["git", "cat-file", "-e", match["commit"]], cwd=ROOT, capture_output=True, check=False)
        if known.returncode != 0:
            pytest.skip(f"commit {match['commit']} is not in this clone's history (shallow?)")
        return [f"{match['path']} does not exist at {match['commit']}"]
    section = match["section"].strip('"')
    return [] if section in shown.stdout else [f"{match['path']} at {match['commit']} has no section {section!r}"]


DOC_PATH = re.compile(r"(?<![\w/.-])docs/[\w./-]*\w\.(?:md|csv|jsonl?|png|py)\b")
EXAMPLES = ("tests/test_docs_hygiene.py", "tests/test_docs.py")


def test_every_docs_file_named_in_tracked_text_exists() -> None:
    """A comment or page that names a file under docs/ names one that is there (or a record at a commit)."""
    found = []
    for name, text in tracked_text_files():
        if name in EXAMPLES:
            continue
        for lineno, line in enumerate(text.splitlines(), 1):
            for match in DOC_PATH.finditer(line):
                if not (ROOT / match.group(0)).exists() and not PINNED.match(line[match.end():]):
                    found.append(f"{name}:{lineno}: {match.group(0)}")
    assert not found, "files under docs/ that are not there:\n" + "\n".join(found)
