"""The Performance Analysis of an SFT target, where its author wrote none: written from what is known about
the program, never invented. What changed against the reference comes from the program's origin (a
template rewrite says what it does) or from its source (a custom kernel, the operators it drops or adds);
the speedup is the measured one; why it is plausibly faster follows from the change. The five answers
follow the prompt's five questions, one line each: the tiny policy's tokenizer turns a line that recurs
into one token, so the fixed lines cost almost nothing in the policy's answer.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass

# origin -> (what the program does differently, why that is plausibly faster)
_TEMPLATES = {
    "baseline": ("is the reference unchanged", "nothing changed"),
    "no_grad": ("runs forward under torch.no_grad", "no autograd graph is recorded"),
    "inference_mode": ("runs forward under torch.inference_mode", "no autograd bookkeeping or version counters"),
    "channels_last": ("keeps tensors channels-last (NHWC)", "convolution kernels prefer that layout"),
    "cuda_graph": ("replays forward as one captured CUDA graph", "one launch replaces a launch per operator"),
}
_SKIP_CALLS = {"super", "__init__", "forward", "get_inputs", "get_init_inputs", "print", "range", "len", "isinstance",
               "tuple", "list", "int", "float"}


@dataclass(frozen=True)
class Change:
    """What a program changes against its reference, and why that is plausibly faster."""

    what: str
    why: str


def _calls(source: str) -> set[str]:
    """Names the functions of ``source`` call (``torch.matmul`` -> ``matmul``), ``@`` as ``matmul``; the
    input builders left out (their sizes are the reference's)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    names: set[str] = set()
    for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
        if fn.name in ("get_inputs", "get_init_inputs"):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if name and not name.startswith("_") and name not in _SKIP_CALLS:
                    names.add(name)
            elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
                names.add("matmul")
    return names


def _listed(names: set[str]) -> str:
    shown = sorted(names)[:3]
    return ", ".join(shown) + (" ..." if len(names) > 3 else "")


def describe_change(reference: str, program: str, origin: str) -> Change:
    """What ``program`` changes against ``reference``.

    >>> describe_change("", "", "template:no_grad").what
    'runs forward under torch.no_grad'
    >>> ref = "def forward(self, a, B):\\n    return torch.diag(a) @ B\\n"
    >>> new = "def forward(self, a, B):\\n    return B * a.unsqueeze(1)\\n"
    >>> c = describe_change(ref, new, "teacher:release"); c.what, c.why
    ('replaces diag, matmul by unsqueeze', 'less work: diag, matmul no longer run')
    """
    kind = origin.split(":", 1)[1] if origin.startswith("template:") else ""
    if kind in _TEMPLATES:
        return Change(*_TEMPLATES[kind])
    if kind.startswith("compile-"):
        return Change(f"compiles forward with torch.compile (mode {kind.removeprefix('compile-')})",
                      "Inductor fuses operators into fewer kernels")
    if "load_inline" in program or "cpp_extension" in program:
        language = "CUDA" if "__global__" in program else "C++"
        return Change(f"computes forward in a custom {language} kernel",
                      "one kernel does the work of several operators, without their intermediate tensors")
    before, after = _calls(reference), _calls(program)
    dropped, added = before - after, after - before
    if dropped and added:
        return Change(f"replaces {_listed(dropped)} by {_listed(added)}", f"less work: {_listed(dropped)} no longer run")
    if dropped:
        return Change(f"drops {_listed(dropped)}", f"less work: {_listed(dropped)} no longer run")
    if added:
        return Change(f"adds {_listed(added)}", "the same result through different operators")
    return Change("rearranges the reference's operators", "fewer passes over memory")


def analysis_text(change: Change, speedup: float | None, best: tuple[int, float, Change] | None = None) -> str:
    """The five answers. ``best``: (its number, speedup, change) of the fastest implementation the prompt
    showed, None when it showed none; ``speedup``: this program's measured one (None: not measured).

    >>> print(analysis_text(Change("runs forward under torch.no_grad", "no autograd graph is recorded"), 1.31))
    1. No earlier implementation to compare.
    2. This program runs forward under torch.no_grad: measured 1.31x against the reference.
    3. It is faster because no autograd graph is recorded.
    4. Fusion and custom kernels.
    5. The main computation in forward.
    """
    if best is None:
        first = "1. No earlier implementation to compare."
    else:
        number, fastest, how = best
        first = f"1. Implementation {number} is the fastest shown ({fastest:.2f}x): it {how.what}."
    measured = f": measured {speedup:.2f}x against the reference" if speedup is not None else ""
    faster = speedup is not None and speedup >= 1.05  # below: within the CPU timings' scatter
    third = f"3. It is faster because {change.why}." if faster else \
        f"3. Limit: at these sizes it stays near the reference's speed ({change.why})."
    fourth = "4. Fusing more operators into the kernel." if "kernel" in change.what else "4. Fusion and custom kernels."
    return "\n".join([first, f"2. This program {change.what}{measured}.", third, fourth,
                      "5. The main computation in forward."])


def written_analyses(reference: str, entries: Sequence[tuple[str, str, float | None]]) -> list[str]:
    """Every line the analyses of one problem's corpus programs (source, origin, speedup) can hold, for the
    tiny policy's tokenizer: the lines about each program, alone and as the fastest one shown."""
    lines = []
    for source, origin, speedup in entries:
        change = describe_change(reference, source, origin)
        lines.append(analysis_text(change, speedup))
        lines += [analysis_text(change, speedup, (n, speedup or 1.0, change)).split("\n", 1)[0] for n in (1, 2)]
    return lines
