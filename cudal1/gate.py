"""The promotion gate's rule, pure: two policies' best speedup per problem (measured on the same problems under
the same protocol) in, a decision with its figures out. The flow that measures them is ``flows/gate.py``.

The rule, in the order it is applied:

1. No champion yet: the new version becomes the champion.
2. It solves fewer problems than the champion: kept out.
3. It solves more, by at least ``margin.success_rate`` (a fraction of the problems): promoted.
4. Otherwise (as many problems): promoted only when its mean speedup over the problems *both* solve beats the
   champion's by the factor ``1 + margin.speedup``; comparing over the common problems keeps one easy extra
   problem from deciding it.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Margin:
    """How much better the new version must be. ``success_rate``: an absolute gain in the fraction of
    problems solved (0.0: any gain of at least one problem); ``speedup``: a relative gain in mean speedup
    over the problems both solve (0.02: 2% faster)."""

    success_rate: float = 0.0
    speedup: float = 0.02

    def __post_init__(self) -> None:
        if self.success_rate < 0 or self.speedup < 0:
            raise ValueError(f"margin {self}: use non-negative values (0 accepts any gain)")


@dataclass(frozen=True)
class Figures:
    """One policy's figures on the gate's problems."""

    problems: int
    solved: int
    success_rate: float
    mean_speedup: float | None  # over every problem it solves
    common: int  # problems both policies solve
    mean_speedup_common: float | None
    median_speedup_common: float | None


@dataclass(frozen=True)
class Decision:
    promote: bool
    reason: str
    new: Figures
    champion: Figures | None

    def metrics(self) -> dict[str, float | int | None]:
        """Flat figures for MLflow and ``dvc metrics``: ``new.success_rate``, ``champion.mean_speedup_common``..."""
        out: dict[str, float | int | None] = {"promoted": int(self.promote)}
        for who, figures in (("new", self.new), ("champion", self.champion)):
            if figures is not None:
                out |= {f"{who}.{k}": v for k, v in asdict(figures).items()}
        return out


def figures(best: Mapping[str, float], other: Mapping[str, float] | None, problems: int) -> Figures:
    """``best``: problem id -> best speedup of the policy's correct programs; ``other``: the other policy's.

    >>> f = figures({"a": 2.0, "b": 1.0}, {"b": 3.0}, problems=4)
    >>> f.success_rate, f.mean_speedup, f.common, f.mean_speedup_common
    (0.5, 1.5, 1, 1.0)
    """
    if problems < 1:
        raise ValueError("the gate needs at least one problem")
    common = sorted(set(best) & set(other)) if other is not None else sorted(best)
    speedups = [best[p] for p in common]
    return Figures(
        problems=problems, solved=len(best), success_rate=len(best) / problems,
        mean_speedup=statistics.fmean(best.values()) if best else None, common=len(common),
        mean_speedup_common=statistics.fmean(speedups) if speedups else None,
        median_speedup_common=statistics.median(speedups) if speedups else None,
    )


def decide(new: Mapping[str, float], champion: Mapping[str, float] | None, problems: int,
           margin: Margin = Margin()) -> Decision:
    """Apply the rule of this module's docstring.

    >>> decide({"a": 1.0}, None, 2).promote
    True
    >>> decide({"a": 1.0}, {"a": 1.0, "b": 1.0}, 2).reason
    'solves 1 of 2 problems, the champion 2'
    >>> decide({"a": 1.1, "b": 1.0}, {"a": 1.0}, 2).promote
    True
    >>> decide({"a": 1.01}, {"a": 1.0}, 2, Margin(speedup=0.02)).promote
    False
    """
    mine = figures(new, champion, problems)
    if champion is None:
        return Decision(True, "no champion yet: the first version becomes the champion", mine, None)
    theirs = figures(champion, new, problems)
    gain = mine.success_rate - theirs.success_rate
    solved = f"solves {mine.solved} of {problems} problems, the champion {theirs.solved}"
    if gain < 0 or gain > 0 and gain >= margin.success_rate:
        return Decision(gain > 0, solved, mine, theirs)
    if gain > 0:
        return Decision(False, f"solves {mine.solved - theirs.solved} more problem(s), below the margin of "
                               f"{margin.success_rate:.0%} of the problems", mine, theirs)
    if not mine.common:
        return Decision(False, "no problem solved by both: nothing to compare speedups on", mine, theirs)
    assert mine.mean_speedup_common is not None and theirs.mean_speedup_common is not None
    ratio = mine.mean_speedup_common / theirs.mean_speedup_common
    verdict = (f"mean speedup over the {mine.common} problem(s) both solve {mine.mean_speedup_common:.3f}x against "
               f"{theirs.mean_speedup_common:.3f}x ({ratio - 1:+.1%}, margin {margin.speedup:.0%})")
    return Decision(ratio >= 1 + margin.speedup, verdict, mine, theirs)
