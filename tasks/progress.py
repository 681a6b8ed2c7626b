"""Progress for long loops: a line in the Prefect log per item (what the UI and CI show) and a rich bar
when a person watches a terminal."""

from __future__ import annotations

import logging
import sys
from collections import Counter
from typing import Any

from cudal1.candidates import Evaluation


class EvaluationProgress:
    """Callable handed to ``evaluate_many``; it is called from the evaluator's device threads."""

    def __init__(self, logger: logging.Logger | logging.LoggerAdapter, total: int, label: str) -> None:
        self.logger, self.total, self.label = logger, total, label
        self.done = 0
        self.statuses: Counter[str] = Counter()
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> EvaluationProgress:
        if sys.stderr.isatty() and self.total:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), transient=True)
            self._bar.start()
            self._task = self._bar.add_task(self.label, total=self.total)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()

    def __call__(self, evaluation: Evaluation) -> None:
        self.done += 1
        self.statuses[evaluation.status.value] += 1
        speed = f" {evaluation.speedup:.2f}x" if evaluation.speedup is not None else ""
        why = f" ({evaluation.reason[:120]})" if evaluation.reason and not evaluation.ok else ""
        self.logger.info(f"{self.label} [{self.done}/{self.total}] {evaluation.problem_id} "
                         f"{evaluation.candidate_id}: {evaluation.status.value}{speed}{why}")
        if self._bar is not None:
            self._bar.update(self._task, advance=1)
