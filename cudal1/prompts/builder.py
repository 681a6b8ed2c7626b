"""The contrastive prompt (CUDA-L1 Table 3): task header, reference, earlier candidates with their measured
speedups, the three-section protocol and the requirements. The wording lives in the ``.txt`` files beside
this module so it can be read and changed without touching code."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from string import Template


@dataclass(frozen=True)
class Exemplar:
    """An earlier, correct candidate shown in a prompt with its measured speedup."""

    source: str
    speedup: float


@cache
def prompt_text(name: str) -> str:
    """One of the package's prompt files (``contrastive``, ``exemplar``, ``no_exemplars``, ``response``)."""
    return resources.files(__package__).joinpath(f"{name}.txt").read_text(encoding="utf-8")


def _fence_safe(code: str) -> str:
    # A program is shown inside a ``` fence; trailing blank lines would only cost tokens.
    return code.strip("\n")


def format_exemplars(exemplars: Sequence[Exemplar]) -> str:
    if not exemplars:
        return prompt_text("no_exemplars").rstrip("\n")
    template = Template(prompt_text("exemplar"))
    blocks = [
        template.substitute(index=i, speedup=f"{ex.speedup:.2f}", source=_fence_safe(ex.source)).rstrip("\n")
        for i, ex in enumerate(exemplars, 1)
    ]
    return "\n".join(blocks)


def build_prompt(reference: str, exemplars: Sequence[Exemplar] = ()) -> str:
    """The full contrastive prompt for one problem.

    >>> p = build_prompt("class Model: ...", [Exemplar("class ModelNew: ...", 1.234)])
    >>> "## Implementation 1 (speedup 1.23x)" in p and "## Code Implementation" in p
    True
    """
    return Template(prompt_text("contrastive")).substitute(
        reference=_fence_safe(reference), exemplars=format_exemplars(exemplars)
    )


def render_response(analysis: str, design: str, code: str) -> str:
    """A response in the protocol's format: the SFT targets are written this way, and the parser reads it."""
    return Template(prompt_text("response")).substitute(
        analysis=analysis.strip(), design=design.strip(), code=_fence_safe(code)
    )
