"""Read a model response: the three protocol sections, the program, and what is wrong with the format.

Decisions (documented in docs/learning.md at 88f971b):
- Several fenced blocks: the **last** block inside ``## Code Implementation`` is the program (or the last
  block of the response when that section is missing). Models draft, then revise; the protocol puts the
  final program last. The choice is recorded as a non-fatal format error.
- A fence that never closes (a truncated generation) gives no program: half a program cannot be correct
  and evaluating it only burns evaluator time.
- A program without ``class ModelNew`` is fatal: the evaluator could not load it anyway.
- A response of the learning stages must also hold a Performance Analysis (``analysed``); the others (a
  teacher's answer, ``cudal1 optimize``) are read for their program alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

SECTIONS = ("Performance Analysis", "Algorithm Design", "Code Implementation")

_HEADING = re.compile(r"^#{2,3}[ \t]*(performance analysis|algorithm design|code implementation)[ \t]*:?[ \t]*$",
                      re.IGNORECASE | re.MULTILINE)
_FENCE = re.compile(r"^[ \t]*```[ \t]*([A-Za-z0-9_+-]*)[ \t]*$", re.MULTILINE)
_MODEL_NEW = re.compile(r"^class[ \t]+ModelNew\b", re.MULTILINE)


@dataclass(frozen=True)
class ParsedResponse:
    code: str | None
    sections: dict[str, str] = field(default_factory=dict)
    errors: tuple[str, ...] = ()
    fatal: bool = False  # True when there is nothing worth evaluating

    @property
    def ok(self) -> bool:
        """A program worth evaluating (non-fatal format errors allowed)."""
        return self.code is not None and not self.fatal

    @property
    def well_formed(self) -> bool:
        return not self.errors

    @property
    def analysis(self) -> str:
        """The Performance Analysis section's text; '' when it is missing or empty."""
        return self.sections.get("Performance Analysis", "")

    @property
    def analysed(self) -> bool:
        """A program worth evaluating, written after an analysis: what the learning stages reward (the
        protocol asks for the analysis first, and the method credits it for what RL learns)."""
        return self.ok and bool(self.analysis.strip())


def _sections(text: str) -> dict[str, tuple[int, int, str]]:
    """Section name -> (start, end, body). A repeated heading keeps its last occurrence."""
    heads = list(_HEADING.finditer(text))
    out: dict[str, tuple[int, int, str]] = {}
    for i, m in enumerate(heads):
        name = next(s for s in SECTIONS if s.lower() == m.group(1).lower())
        end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
        out[name] = (m.end(), end, text[m.end():end].strip())
    return out


def _blocks(text: str, start: int = 0, end: int | None = None) -> tuple[list[str], bool]:
    """Fenced blocks between ``start`` and ``end``; the flag says a fence was left open."""
    end = len(text) if end is None else end
    fences = [m for m in _FENCE.finditer(text) if start <= m.start() < end]
    blocks, open_at = [], None
    for m in fences:
        if open_at is None:
            open_at = m
        elif m.group(1) == "":  # a bare fence closes; a ```python line inside a block is just text
            blocks.append(text[open_at.end():m.start()].strip("\n"))
            open_at = None
    return blocks, open_at is not None


def parse_response(text: str) -> ParsedResponse:
    """Split a response into sections and a program, listing format errors.

    >>> r = parse_response("## Performance Analysis\\nx\\n## Algorithm Design\\ny\\n"
    ...                    "## Code Implementation\\n```python\\nclass ModelNew: pass\\n```\\n")
    >>> r.ok, r.errors, r.code
    (True, (), 'class ModelNew: pass\\n')
    >>> parse_response("no code here").errors[-1]
    'no fenced code block'
    """
    errors: list[str] = []
    found = _sections(text)
    for name in SECTIONS:
        if name not in found:
            errors.append(f"missing section: ## {name}")
        elif name != "Code Implementation" and not found[name][2]:
            errors.append(f"empty section: ## {name}")
    if "Code Implementation" in found:
        start, end, _ = found["Code Implementation"]
        blocks, unclosed = _blocks(text, start, end)
        if not blocks and not unclosed:
            blocks, unclosed = _blocks(text)
            if blocks:
                errors.append("code block outside ## Code Implementation")
    else:
        blocks, unclosed = _blocks(text)
    sections = {name: body for name, (_, _, body) in found.items()}
    if unclosed:
        errors.append("unclosed code block (truncated response?)")
    if not blocks:
        if not unclosed:
            errors.append("no fenced code block")
        return ParsedResponse(None, sections, tuple(errors), fatal=True)
    if len(blocks) > 1:
        errors.append(f"{len(blocks)} code blocks; the last one is used")
    # One trailing newline, as in a file: the same program parsed from two responses hashes the same,
    # and matches the corpus programs it copies (the pool caches by source hash).
    code = blocks[-1].strip("\n") + "\n"
    if unclosed:
        # A later block was cut off: the earlier complete one is not the final program either.
        return ParsedResponse(None, sections, tuple(errors), fatal=True)
    if not _MODEL_NEW.search(code):
        errors.append("no `class ModelNew` in the program")
        return ParsedResponse(code, sections, tuple(errors), fatal=True)
    return ParsedResponse(code, sections, tuple(errors))
