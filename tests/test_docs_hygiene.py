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
