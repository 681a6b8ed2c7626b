"""Regenerate every generated part of the docs, so that a figure lives in one place.

    python docs/generate.py           # rewrite README.md, docs/**/*.md and the reference pages
    python docs/generate.py --check   # exit 1 with a unified diff where a file differs from its regenerated form

Markers in README.md and docs/**/*.md (fenced code blocks are left alone):

- ``<!-- fig NAME KEY FORMAT -->TEXT<!-- /fig -->``: TEXT becomes ``FORMAT.format(value)``, value =
  ``read_result(NAME).figures[KEY]`` (cudal1/measured.py); FORMAT is the rest of the comment, default ``{}``.
- ``<!-- table NAME KEY [FORMAT] -->`` newline, a markdown table, ``<!-- /table -->``: the table
  ``read_result(NAME).tables[KEY]``; FORMAT, when given, formats the float cells.
- ``<!-- source NAME -->TEXT<!-- /source -->``: "measured DATE on HARDWARE, commit COMMIT: `COMMAND`".
- ``<!-- default CLASS.FIELD [FORMAT] -->TEXT<!-- /default -->``: a protocol default, read from the
  dataclass (``EvalConfig`` and the params sections), so a page that states one cannot drift from the code.

Two pages are written whole from the code (dataclass fields, the comments above each field and on its
line, class docstrings): docs/reference/params.md and docs/reference/evalconfig.md (docs/reference_pages.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]

from reference_pages import evalconfig_page, params_page, section_classes  # noqa: E402

from cudal1.measured import Result, Table, read_result  # noqa: E402

OPEN = re.compile(r"<!-- (fig|table|source|default) ")
FMT = r"(?: (?P<fmt>(?:(?!-->)[^\n])*?))?"  # the rest of the opening comment, never past its end
TEXT = r"(?P<text>(?:(?!<!-- (?:fig|table|source|default) ).)*?)"  # never across another marker
FIG = re.compile(r"<!-- fig (?P<name>\S+) (?P<key>\S+)" + FMT + r" -->" + TEXT + r"<!-- /fig -->", re.S)
TABLE = re.compile(r"<!-- table (?P<name>\S+) (?P<key>\S+)" + FMT + r" -->\n" + TEXT + r"<!-- /table -->", re.S)
SOURCE = re.compile(r"<!-- source (?P<name>\S+) -->" + TEXT + r"<!-- /source -->", re.S)
DEFAULT = re.compile(r"<!-- default (?P<cls>\w+)\.(?P<field>\w+)" + FMT + r" -->" + TEXT + r"<!-- /default -->", re.S)
FENCE = re.compile(r"^```.*?^```[^\n]*$", re.M | re.S)
REFERENCE_PAGES: dict[str, Callable[[], str]] = {
    "docs/reference/params.md": params_page,
    "docs/reference/evalconfig.md": evalconfig_page,
}


class MarkerError(ValueError):
    """A marker that cannot be filled: names the file, the marker and the fix."""


def pages(root: Path = ROOT) -> list[Path]:
    """README.md and every page under docs/ that is not written whole by this script."""
    found = [root / "README.md"] + sorted((root / "docs").rglob("*.md"))
    whole = {root / name for name in REFERENCE_PAGES}
    return [p for p in found if p.is_file() and p not in whole]


def format_cell(value: Any, fmt: str | None = None) -> str:
    """A table cell: ``-`` for nothing, floats by ``fmt`` or to three significant digits (one decimal from 10)."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if fmt:
            return fmt.format(value)
        return f"{value:.1f}" if abs(value) >= 10 else f"{value:.3g}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def render_table(table: Table, fmt: str | None = None) -> str:
    lines = ["| " + " | ".join(table.columns) + " |", "| " + " | ".join("---" for _ in table.columns) + " |"]
    lines += ["| " + " | ".join(format_cell(cell, fmt) for cell in row) + " |" for row in table.rows]
    return "\n".join(lines) + "\n"


def render_source(result: Result) -> str:
    ticks = "``" if "`" in result.command else "`"
    return f"measured {result.date} on {result.hardware}, commit {result.commit}: {ticks}{result.command}{ticks}"


class Filler:
    """Fills the markers of one page, reading each result once; errors name ``where`` (the page)."""

    def __init__(self, where: str, results_root: Path | None = None) -> None:
        self.where = where
        self.results_root = results_root
        self.cache: dict[str, Result] = {}

    def fail(self, match: re.Match[str], problem: str, fix: str) -> MarkerError:
        marker = match.group(0).split("-->", 1)[0] + "-->"
        return MarkerError(f"{self.where}: {marker}: {problem}. Fix: {fix}")

    def result(self, match: re.Match[str]) -> Result:
        name = match.group("name")
        if name not in self.cache:
            where = self.results_root / name if self.results_root else name
            try:
                self.cache[name] = read_result(where)
            except FileNotFoundError:
                raise self.fail(match, f"no results file results/{name}/result.json",
                                "measure it with the script that writes it, or correct the marker's name") from None
        return self.cache[name]

    def fig(self, match: re.Match[str]) -> str:
        result, key = self.result(match), match.group("key")
        if key not in result.figures:
            raise self.fail(match, f"results/{result.name} has no figure {key!r} (it has: "
                            f"{', '.join(sorted(result.figures))})", "correct the marker's key, or measure it again")
        fmt = match.group("fmt") or "{}"
        try:
            text = fmt.format(result.figures[key])
        except (ValueError, TypeError, IndexError, KeyError) as exc:
            raise self.fail(match, f"format {fmt!r} does not take {result.figures[key]!r} ({exc})",
                            "give a format for this kind of value, e.g. {} or {:.1f}") from None
        head = match.group(0)[: match.start("text") - match.start(0)]
        return head + text + "<!-- /fig -->"

    def table(self, match: re.Match[str]) -> str:
        result, key = self.result(match), match.group("key")
        if key not in result.tables:
            raise self.fail(match, f"results/{result.name} has no table {key!r} (it has: "
                            f"{', '.join(sorted(result.tables)) or 'none'})", "correct the marker's key")
        head = match.group(0)[: match.start("text") - match.start(0)]
        return head + render_table(result.tables[key], match.group("fmt")) + "<!-- /table -->"

    def source(self, match: re.Match[str]) -> str:
        head = match.group(0)[: match.start("text") - match.start(0)]
        return head + render_source(self.result(match)) + "<!-- /source -->"

    def default(self, match: re.Match[str]) -> str:
        classes = section_classes()
        cls, name = classes.get(match.group("cls")), match.group("field")
        fields = {f.name: f for f in dataclasses.fields(cls)} if cls else {}
        if name not in fields:
            known = ", ".join(sorted(classes)) if cls is None else ", ".join(sorted(fields))
            raise self.fail(match, f"no field {match.group('cls')}.{name} (known: {known})",
                            "name a field that exists, or drop the marker with the setting it stated")
        value = getattr(cls(), name)
        text = (match.group("fmt") or "{}").format(value)
        head = match.group(0)[: match.start("text") - match.start(0)]
        return head + text + "<!-- /default -->"


def fill(text: str, where: str, results_root: Path | None = None) -> str:
    """``text`` with every marker outside fenced code regenerated."""
    filler = Filler(where, results_root)
    out, last = [], 0
    for fence in [*FENCE.finditer(text), None]:
        end = fence.start() if fence else len(text)
        out.append(_fill_prose(text[last:end], filler, text[:last].count("\n")))
        if fence:
            out.append(fence.group(0))
            last = fence.end()
    return "".join(out)


def _fill_prose(chunk: str, filler: Filler, first_line: int) -> str:
    closed = sum(len(p.findall(chunk)) for p in (FIG, TABLE, SOURCE, DEFAULT))
    if len(OPEN.findall(chunk)) != closed:
        line = first_line + next((chunk[: m.start()].count("\n") + 1 for m in OPEN.finditer(chunk)
                     if not any(p.match(chunk, m.start()) for p in (FIG, TABLE, SOURCE, DEFAULT))), 1)
        raise MarkerError(f"{filler.where}: the marker on line {line} is not closed or not well formed. "
                          "Fix: end it with <!-- /fig -->, <!-- /table --> (on its own line), <!-- /source --> or "
                          "<!-- /default -->, with NAME and KEY in the opening comment")
    for pattern, method in ((TABLE, filler.table), (FIG, filler.fig), (SOURCE, filler.source),
                            (DEFAULT, filler.default)):
        chunk = pattern.sub(method, chunk)
    return chunk


def regenerate(root: Path = ROOT, results_root: Path | None = None) -> dict[Path, str]:
    """Every generated file's regenerated text, by path."""
    out = {page: fill(page.read_text(encoding="utf-8"), str(page.relative_to(root)), results_root)
           for page in pages(root)}
    for name, make in REFERENCE_PAGES.items():
        out[root / name] = make()
    return out


def differences(generated: dict[Path, str], root: Path = ROOT) -> str:
    """A unified diff of every file whose text on disk differs from its regenerated text."""
    diffs = []
    for path, text in generated.items():
        current = path.read_text(encoding="utf-8") if path.is_file() else ""
        if current != text:
            name = str(path.relative_to(root))
            diffs += difflib.unified_diff(current.splitlines(keepends=True), text.splitlines(keepends=True),
                                          f"a/{name}", f"b/{name} (regenerated)")
    return "".join(diffs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 with a diff where a file differs")
    args = parser.parse_args(argv)
    try:
        generated = regenerate()
    except MarkerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.check:
        diff = differences(generated)
        if diff:
            sys.stdout.write(diff)
            print("\nerror: the docs differ from their regenerated form; run `python docs/generate.py` "
                  "(or `make docs`) and commit the result", file=sys.stderr)
            return 1
        return 0
    for path, text in generated.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
