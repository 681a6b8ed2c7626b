"""The template teacher: generic, semantics-preserving rewrites of any reference into a ``ModelNew``.

It needs no model and no network, so it is the offline default of the augment stage, and its
candidates are the baselines an LLM's candidate has to beat (CUDA-L1 compares against torch.compile
and CUDA graphs). Each rewrite appends a ``ModelNew(Model)`` subclass to the reference source: the
constructor, parameters and initialisation stay the reference's own, so the candidate is correct by
construction and only the way ``forward`` is executed changes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from cudal1.candidates import Candidate
from cudal1.problems import Problem

_HEADER = "\n\n# ---- cudal1 template teacher: {variant} ----\nimport torch as _torch\n\n\n"

_BASELINE = '''class ModelNew(Model):
    """The reference, unchanged: the baseline every other candidate is measured against."""
'''

_NO_GRAD = '''class ModelNew(Model):
    """The reference under no_grad: no autograd graph is recorded for the outputs."""

    def forward(self, *args, **kwargs):
        with _torch.no_grad():
            return super().forward(*args, **kwargs)
'''

_INFERENCE_MODE = '''class ModelNew(Model):
    """The reference under inference_mode: no autograd bookkeeping and no version counters."""

    def forward(self, *args, **kwargs):
        with _torch.inference_mode():
            return super().forward(*args, **kwargs)
'''

_CHANNELS_LAST = '''def _cudal1_channels_last(x):
    if isinstance(x, _torch.Tensor) and x.dim() == 4:
        return x.contiguous(memory_format=_torch.channels_last)
    if isinstance(x, _torch.Tensor) and x.dim() == 5:
        return x.contiguous(memory_format=_torch.channels_last_3d)
    return x


class ModelNew(Model):
    """The reference with NHWC (channels-last) weights and activations, which conv kernels prefer."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for p in self.parameters():
            p.data = _cudal1_channels_last(p.data)

    def forward(self, *args, **kwargs):
        args = tuple(_cudal1_channels_last(a) for a in args)
        out = super().forward(*args, **kwargs)
        if isinstance(out, _torch.Tensor):
            return out.contiguous()  # hand back the reference's layout
        return out
'''

_COMPILE = '''class ModelNew(Model):
    """The reference compiled with torch.compile(mode={mode!r})."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._cudal1_compiled = _torch.compile(super().forward, mode={mode!r}, dynamic=False)

    def forward(self, *args, **kwargs):
        return self._cudal1_compiled(*args, **kwargs)
'''

# Capture once per input signature, then copy the new inputs into the static buffers and replay.
# The output is cloned so a caller never holds a buffer the next replay overwrites. Warm-up runs on the
# caller's stream (no side stream), so nothing escapes the timed region.
_CUDA_GRAPH = '''class ModelNew(Model):
    """The reference's forward captured once into a CUDA graph and replayed on every call."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._cudal1_graph = None
        self._cudal1_key = None

    def _cudal1_capture(self, args):
        self._cudal1_static = [a.clone() for a in args]
        with _torch.no_grad():
            for _ in range(2):
                super().forward(*self._cudal1_static)
            _torch.cuda.current_stream().synchronize()
            graph = _torch.cuda.CUDAGraph()
            with _torch.cuda.graph(graph):
                self._cudal1_out = super().forward(*self._cudal1_static)
        self._cudal1_graph = graph

    def forward(self, *args):
        if not args or not all(isinstance(a, _torch.Tensor) and a.is_cuda for a in args):
            return super().forward(*args)
        key = tuple((tuple(a.shape), a.dtype, a.device) for a in args)
        if key != self._cudal1_key:
            self._cudal1_capture(args)
            self._cudal1_key = key
        for static, a in zip(self._cudal1_static, args):
            static.copy_(a)
        self._cudal1_graph.replay()
        out = self._cudal1_out
        if isinstance(out, _torch.Tensor):
            return out.clone()
        return type(out)(o.clone() if isinstance(o, _torch.Tensor) else o for o in out)
'''

_CONV = re.compile(r"\b(nn\.Conv[23]d|F\.conv[23]d|conv[23]d|ConvTranspose[23]d)\b")

_VARIANTS = {
    "baseline": _BASELINE,
    "no_grad": _NO_GRAD,
    "inference_mode": _INFERENCE_MODE,
    "channels_last": _CHANNELS_LAST,
    "cuda_graph": _CUDA_GRAPH,
}


def is_conv_problem(source: str) -> bool:
    """Channels-last only pays off (and is only tried) where a 2-D or 3-D convolution appears."""
    return bool(_CONV.search(source))


def template_source(problem: Problem, variant: str, compile_mode: str | None = None) -> str:
    """The reference with a ``ModelNew`` appended. ``variant`` is a key of the template table, or
    ``compile`` with ``compile_mode`` (a torch.compile mode)."""
    if variant == "compile":
        if not compile_mode:
            raise ValueError("variant 'compile' needs compile_mode, e.g. 'default' or 'reduce-overhead'")
        body = _COMPILE.format(mode=compile_mode)
        label = f"compile-{compile_mode}"
    elif variant in _VARIANTS:
        body, label = _VARIANTS[variant], variant
    else:
        raise ValueError(f"unknown template variant {variant!r}; use one of {', '.join(_VARIANTS)} or compile")
    return problem.source.rstrip("\n") + _HEADER.format(variant=label) + body


def template_candidates(
    problem: Problem,
    variants: Sequence[str],
    compile_modes: Sequence[str] = (),
    gpu: bool = False,
) -> list[Candidate]:
    """Every applicable rewrite of ``problem``: CUDA graphs only when a GPU will run them,
    channels-last only for convolutions. Origins read ``template:<variant>``."""
    out = []
    for variant in variants:
        if variant == "cuda_graph" and not gpu:
            continue
        if variant == "channels_last" and not is_conv_problem(problem.source):
            continue
        out.append(Candidate(problem.problem_id, template_source(problem, variant), f"template:{variant}"))
    for mode in compile_modes:
        source = template_source(problem, "compile", mode)
        out.append(Candidate(problem.problem_id, source, f"template:compile-{mode}"))
    return out
