"""Output comparison, done in the trusted parent on tensors loaded with ``weights_only=True``."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import torch

from cudal1.evaluator.config import EvalConfig
from cudal1.evaluator.probes import ACCUMULATION


@dataclass(frozen=True)
class Comparison:
    ok: bool
    reason: str = ""
    max_abs_error: float = 0.0
    max_rel_l2_error: float = 0.0
    # max |out - ref| / (1 + |ref|): the output passes allclose(atol=rtol=t) exactly when this is <= t,
    # so one lenient run tells which stricter tolerances it would also pass.
    max_scaled_error: float = 0.0
    # The share of its allowance the output used (<= 1 passes): the worst element's |out - ref| / (atol +
    # rtol * |ref|), or the relative L2 error over its scale-aware limit, whichever is larger. Near 1,
    # another draw of inputs may fail the program: its verdict may not repeat (config.EDGE).
    tolerance_used: float = 0.0


def _fail(reason: str, abs_err: float = math.inf, rel: float = math.inf, scaled: float = math.inf,
          used: float = math.inf) -> Comparison:
    return Comparison(False, reason, abs_err, rel, scaled, used)


def compare_outputs(reference: list[Any], outputs: list[Any], config: EvalConfig) -> Comparison:
    """Every output against its reference: structure, shape, dtype, non-finite positions, an elementwise
    tolerance by dtype, and a scale-aware relative L2 error so that zeros or a constant cannot pass when
    the reference's values are smaller than the absolute tolerance."""
    if len(reference) != len(outputs):
        return _fail(f"returned {len(outputs)} outputs, the reference returns {len(reference)}")
    worst_abs, worst_rel, worst_scaled, worst_used = 0.0, 0.0, 0.0, 0.0
    for i, (ref, out) in enumerate(zip(reference, outputs)):
        if not isinstance(ref, torch.Tensor):
            if isinstance(out, torch.Tensor) or not isinstance(out, (int, float, bool)):
                return _fail(f"output {i} is {type(out).__name__}, the reference returns {type(ref).__name__}")
            if not math.isclose(float(out), float(ref), rel_tol=1e-4, abs_tol=1e-6):
                return _fail(f"output {i} is {out}, the reference is {ref}")
            continue
        if type(out) is not torch.Tensor:
            return _fail(f"output {i} is a {type(out).__name__}, not a plain torch.Tensor")
        if out.shape != ref.shape:
            return _fail(f"output {i} has shape {tuple(out.shape)}, the reference {tuple(ref.shape)}")
        if out.dtype != ref.dtype:
            return _fail(f"output {i} has dtype {out.dtype}, the reference {ref.dtype}")
        result = _compare_tensor(ref, out, config)
        if not result.ok:
            return replace(result, reason=f"output {i}: {result.reason}")
        worst_abs = max(worst_abs, result.max_abs_error)
        worst_rel = max(worst_rel, result.max_rel_l2_error)
        worst_scaled = max(worst_scaled, result.max_scaled_error)
        worst_used = max(worst_used, result.tolerance_used)
    return Comparison(True, "", worst_abs, worst_rel, worst_scaled, worst_used)


# Elements compared at a time: the float64 working copies of one chunk take a few hundred MB, so a
# KernelBench output of 8 GB (L1-38/39) is checked without tripling the parent's device memory.
CHUNK = 1 << 25


def _compare_tensor(ref: torch.Tensor, out: torch.Tensor, config: EvalConfig, chunk: int = CHUNK,
                    one_read: bool = True) -> Comparison:
    """Elementwise and relative-L2 checks, accumulated chunk by chunk in float64. ``one_read=False`` reads each
    figure of a chunk on its own, as before (tests/test_compare_one_read.py holds the two to the same result).

    >>> cfg = EvalConfig(device="cpu")
    >>> ref = torch.linspace(-1, 1, 1000)
    >>> _compare_tensor(ref, ref + 1e-6, cfg, chunk=64).ok, _compare_tensor(ref, ref + 1e-2, cfg, chunk=64).ok
    (True, False)
    >>> loose_l2 = EvalConfig(device="cpu", rel_l2_tolerance=1.0)  # the elementwise share alone
    >>> round(_compare_tensor(ref, ref + 6e-5, loose_l2, chunk=64).tolerance_used, 1)  # 6e-5 off, allowed 1e-4 (1 + |ref|)
    0.6
    """
    dtype = str(ref.dtype).replace("torch.", "")
    if not (ref.is_floating_point() or ref.is_complex()):
        if torch.equal(ref, out):
            return Comparison(True)
        mismatched = int((ref != out).sum())
        return _fail(f"{mismatched} of {ref.numel()} integer/bool elements differ")
    atol, rtol = config.tolerance_for(dtype)
    if ref.is_complex():  # both parts are checked, as pairs of reals
        ref, out = torch.view_as_real(ref), torch.view_as_real(out)
    flat_r, flat_o = ref.reshape(-1), out.reshape(-1)
    max_abs = scaled = used = 0.0
    diff_sq = ref_sq = 0.0
    finite_n = outside = 0
    for lo in range(0, flat_r.numel(), chunk):
        r = flat_r[lo:lo + chunk].to(torch.float64)
        o = flat_o[lo:lo + chunk].to(torch.float64)
        r_finite, o_finite = torch.isfinite(r), torch.isfinite(o)
        # An all-finite chunk's figures and its count of non-finite elements in one device read (one sync,
        # not seven: the parent's comparisons were a seventh of an RL reward call's device loop).
        nonfinite, *figures = _read([(~(r_finite & o_finite)).sum().to(torch.float64), *_figures(r, o, atol, rtol)],
                                    one_read)
        if nonfinite:  # NaN/Inf must sit where the reference's do and equal them; the rest is compared as usual
            if not torch.equal(r_finite, o_finite):
                bad = int((r_finite != o_finite).sum())
                return _fail(f"{bad} elements are NaN/Inf where the reference is finite (or the reverse)")
            if not torch.equal(r[~r_finite].nan_to_num(), o[~o_finite].nan_to_num()):
                return _fail("non-finite elements differ from the reference's")
            r, o = r[r_finite], o[o_finite]
            if r.numel() == 0:
                continue
            figures = _read(_figures(r, o, atol, rtol), one_read)
        finite_n += r.numel()
        max_abs, scaled, used = max(max_abs, figures[0]), max(scaled, figures[1]), max(used, figures[2])
        diff_sq, ref_sq, outside = diff_sq + figures[3], ref_sq + figures[4], outside + int(figures[5])
    if finite_n == 0:
        return Comparison(True)
    return _verdict(config.rel_l2_for(dtype), atol, rtol, finite_n, outside, max_abs, scaled, used, diff_sq, ref_sq)


def _verdict(limit: float, atol: float, rtol: float, finite_n: int, outside: int, max_abs: float, scaled: float,
             used: float, diff_sq: float, ref_sq: float) -> Comparison:
    """The comparison of a tensor's finite elements from their accumulated figures: elementwise (``outside``
    the tolerance), then the relative L2 error against ``limit``."""
    ref_norm = math.sqrt(ref_sq)
    rel_l2 = math.sqrt(diff_sq) / ref_norm if ref_norm > 0 else (0.0 if max_abs == 0 else math.inf)
    if ref_norm > 0 and limit > 0:
        used = max(used, rel_l2 / limit)
    if outside:
        return _fail(f"{outside} of {finite_n} elements outside atol={atol:g} rtol={rtol:g} "
                     f"(max abs error {max_abs:.3g})", max_abs, rel_l2, scaled, used)
    if ref_norm > 0 and rel_l2 > limit:
        return _fail(f"relative L2 error {rel_l2:.3g} exceeds {limit:g} (scale-aware check: the output is "
                     "close in absolute terms only because the reference's values are small)", max_abs, rel_l2, scaled,
                     used)
    return Comparison(True, "", max_abs, rel_l2, scaled, used)


def _figures(r: torch.Tensor, o: torch.Tensor, atol: float, rtol: float) -> list[torch.Tensor]:
    """A finite chunk's figures, as float64 scalars on its device: the largest error, the largest error over
    (1 + |ref|), the largest share of the allowance used, the sums of squares of the error and of the
    reference, and the number of elements outside the allowance."""
    diff, r_abs = (o - r).abs(), r.abs()
    allowed = atol + rtol * r_abs
    return [diff.max(), (diff / (1 + r_abs)).max(), (diff / allowed.clamp_min(1e-300)).max(), diff.square().sum(),
            r.square().sum(), (diff > allowed).sum().to(torch.float64)]


def _read(values: list[torch.Tensor], one_read: bool) -> list[float]:
    """The scalars as Python floats: in one read, or one read each (``one_read=False``, as before)."""
    return torch.stack(values).tolist() if one_read else [float(v) for v in values]


def inputs_unchanged(before: list[Any], after: list[Any]) -> str:
    """Empty when every input is bit-identical after the call; otherwise which input changed."""
    if len(before) != len(after):
        return f"the call changed the number of inputs ({len(before)} -> {len(after)})"
    for i, (b, a) in enumerate(zip(before, after)):
        if isinstance(b, torch.Tensor):
            if not isinstance(a, torch.Tensor) or a.shape != b.shape or a.dtype != b.dtype:
                return f"input {i} was replaced"
            if not torch.equal(torch.nan_to_num(a, nan=1.2345), torch.nan_to_num(b, nan=1.2345)):
                return f"input {i} was modified in place (the candidate mutates its inputs)"
        elif a != b:
            return f"input {i} was changed"
    return ""


def outputs_equal(a: list[Any], b: list[Any]) -> bool:
    """Exact equality: used to tell whether a problem's reference output depends on its inputs at all."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if x.shape != y.shape or not torch.equal(x, y):
                return False
        elif x != y:
            return False
    return True


def compare_fingerprints(reference: list[list[float]], candidate: list[list[float]], dtypes: list[str],
                         config: EvalConfig) -> str:
    """Empty when a call's output sums are consistent with passing the elementwise check. Both bounds
    are necessary conditions of passing: from |o - r| <= atol + rtol |r| elementwise, any signed sum
    differs by at most atol N + rtol sum|r|; from ||o - r|| <= t ||r||, by at most t sqrt(N) ||r||."""
    if len(reference) != len(candidate):
        return f"returned {len(candidate)} outputs, the reference {len(reference)}"
    for i, (r, c) in enumerate(zip(reference, candidate)):
        if len(c) != len(r) or c[0] != r[0]:
            return f"output {i} has {c[0] if c else 0:g} elements, the reference {r[0]:g}"
        n, abs_sum, sq_sum = r[0], r[2], r[4]
        dtype = dtypes[i] if i < len(dtypes) else "float32"
        atol, rtol = config.tolerance_for(dtype)
        bound = min(atol * n + rtol * abs_sum, config.rel_l2_for(dtype) * math.sqrt(n * sq_sum))
        # rounding of the sums themselves: float64 sums for float64 outputs, float32 for the rest
        rounding = 1e-9 if dtype.replace("torch.", "") == "float64" else ACCUMULATION
        bound = bound + rounding * abs_sum + 1e-12
        # sum x^2 only sets the scale-aware bound; the three linear sums are the checks.
        for name, rv, cv in zip(("sum", "sum|x|", "weighted sum"), r[1:4], c[1:4]):
            if not math.isfinite(rv):
                continue  # the reference itself is not finite here: the full spot checks decide
            if not math.isfinite(cv):
                return f"output {i} has NaN/Inf where the reference is finite"
            if abs(cv - rv) > bound:
                return f"output {i}: {name} {cv:.6g} vs the reference's {rv:.6g} (allowed difference {bound:.3g})"
    return ""
