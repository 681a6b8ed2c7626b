"""Output fingerprints of timed calls: :class:`Fingerprints` (per call and output, sums of the output
staged on the device and read back once per batch), :func:`fingerprint` for one call alone, and the
constants both programs' sums share (:data:`SHIFT`, :data:`ACCUMULATION`, which the parent's comparison
allows for). Split from :mod:`cudal1.evaluator.probes`, which re-exports these names; the worker's
identity checks cover these methods too.

torch and the standard library only: the GPU evaluation worker imports it.
"""

from __future__ import annotations

import math
from typing import Any

import torch

# Pattern shift range: call i reads the batch's pattern from offset seed_i % SHIFT, so each call is
# weighted differently without drawing a new pattern (a prime, so shifts of nearby seeds do not repeat).
SHIFT = 4099

# Relative rounding of a float32-accumulated sum, as a fraction of sum |x|: float32's 6e-8 per step over
# a reduction tree of up to 2^30 elements, twice over (both programs' sums), rounded up. Two orders of
# magnitude under the tightest default tolerance of a float32 output (1e-4).
ACCUMULATION = 4e-6


class Fingerprints:
    """Per timed call and output: [numel, sum, sum |x|, sum x*w, sum x^2] in float64, w a +-1 pattern
    drawn once per batch from the batch's key (sent with the timing command, unknown before), times a
    +-1 pattern along the output's longest dimension shifted by each call's seed: w[i] = P[i] * A[seed +
    i_longest]. Both factors are laid out in the staged (memory) order once per batch, so weighting costs
    the same for every layout. Taken on every timed call, so no call goes unchecked even if a candidate could
    tell which calls are spot-checked; a fake output would have to match sums of the real one it never
    computed (for a matmul, sum x*w costs as much as the product itself).

    Per call the harness only snapshots each output, right where it used to sum it: one copy into a
    row of a staging buffer (one launch, queued behind the call, no host round trip), in the output's
    own memory order, so that the copy costs what a plain copy costs whatever the layout (a
    channels_last or transposed output copied into logical order ran a permuting copy every call: time
    the candidate's batch paid and the reference's did not, which the wall-clock cross-check read as a
    forged clock; L1-59/62/63/81, docs/evaluator.md at 88f971b). The sums of all
    staged calls are taken together (a handful of launches per batch instead of per call) when the
    buffer is full, when the outputs' layout changes, and in ``values``, which reads everything back in
    one copy. Outputs too large to stage twice within ``stage_bytes`` are staged and summed one call at a time.
    Multiplying by +-1 is exact in every float dtype, so the weighted sum is as exact as the others.
    Sums of float64 outputs are float64; of lower precisions float32 (see :data:`ACCUMULATION`).
    """

    def __init__(self, device: torch.device, key: int, calls: int = 1, stage_bytes: int = 256 << 20,
                 kernels: Any = None) -> None:
        self.device, self.key = device, key
        # The harness's kernels (device_draws.DeviceDraws): the sums in one float64 pass instead of torch's
        # reductions. Both programs of a row sum the same way (the parent's device_draws).
        self.kernels = kernels
        self.calls, self.stage_bytes = max(1, calls), stage_bytes
        self.table: list[tuple[int, torch.Tensor]] = []  # (first call, [calls, outputs, 4] float64)
        self.numels: list[list[float]] = []
        self.scalars: dict[tuple[int, int], float] = {}  # (call, output) -> a Python number's value
        # int8 +-1 (P, A) by output shape, and by (shape, memory order) with P laid out in that order
        self.patterns: dict[Any, tuple[torch.Tensor, torch.Tensor]] = {}
        self.layout: tuple[Any, ...] | None = None
        self.stage: list[torch.Tensor] = []  # per tensor output: [rows, numel]
        self.rows: list[tuple[torch.Tensor, ...]] = []  # per tensor output: its staging rows
        self.capacity = 0  # calls the current staging buffers hold
        self.seeds: list[int] = []  # of the staged calls
        self.first = 0  # index of the first staged call
        self.summed = False  # the call queue() saw last was summed in place (_in_place), not staged
        self.offset: torch.Tensor | None = None  # that call's pattern offset, on the device

    @staticmethod
    def _order(x: torch.Tensor) -> tuple[int, ...]:
        """x's dims from outermost to innermost in memory when x is dense and non-overlapping (contiguous,
        channels_last, any permuted view): x.permute(order) is then contiguous and copying it a plain copy.
        The logical order otherwise (a gap or an overlap: copied element by element, as any layout was)."""
        dims = tuple(range(x.dim()))
        if x.is_contiguous():
            return dims
        order = tuple(sorted(dims, key=lambda d: (-x.stride(d), d)))
        return order if x.permute(order).is_contiguous() else dims

    def _pattern(self, shape: tuple[int, ...], order: tuple[int, ...] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The batch's patterns for an output shape: P (+-1 per element, in ``order``'s memory order,
        logical order by default) and A (+-1 along the longest dimension, SHIFT longer). Drawn in logical
        order from the key and the shape, so every layout of the same values gets the same weights."""
        shape = tuple(shape) or (1,)
        order = tuple(order or range(len(shape)))
        if (shape, order) not in self.patterns:
            if shape not in self.patterns:
                gen = torch.Generator(device=self.device)
                gen.manual_seed(self.key * 1_000_003 + math.prod(shape))
                p = torch.randint(0, 2, shape, generator=gen, device=self.device, dtype=torch.int8)
                a = torch.randint(0, 2, (max(shape) + SHIFT,), generator=gen, device=self.device, dtype=torch.int8)
                self.patterns[shape] = (p.mul_(2).sub_(1), a.mul_(2).sub_(1))
            p, a = self.patterns[shape]
            # one permuting copy per batch and layout, not per call
            self.patterns[(shape, order)] = (p.permute(order).contiguous(), a)
        return self.patterns[(shape, order)]

    def _weights(self, shape: tuple[int, ...], order: tuple[int, ...], offsets: torch.Tensor) -> torch.Tensor:
        """[calls, numel] int8 weights in the staged (memory) order: call i's w = P * A[offset_i:] along
        the longest dimension, written in memory order from P's copy in that order and A's windows."""
        shape, order = tuple(shape) or (1,), tuple(order) or (0,)
        p, a = self._pattern(shape, order)
        m, longest = len(offsets), max(range(len(shape)), key=lambda d: (shape[d], -d))
        w = torch.empty((m, *p.shape), dtype=torch.int8, device=self.device)
        back = [1 + order.index(d) for d in range(len(shape))]  # memory-order dims -> logical dims
        windows = a.as_strided((SHIFT, shape[longest]), (1, 1))[offsets]  # call i: A[offset_i:][:size]
        windows = windows.view(m, *(shape[d] if d == longest else 1 for d in range(len(shape))))
        torch.mul(p.unsqueeze(0).permute(0, *back), windows, out=w.permute(0, *back))
        return w.view(m, -1)

    def add(self, outputs: list[Any], seed: int) -> None:
        self.record(self.queue(outputs, seed=seed)[0], seed)

    def record(self, numels: list[float], seed: int) -> None:
        """The queued call's bookkeeping (what :meth:`queue` returned), before the next call is queued."""
        self.numels.append(numels)
        if self.summed:
            self.summed = False  # summed in place by queue: nothing staged
        else:
            self.seeds.append(seed)

    def queue(self, outputs: list[Any], defer: bool = False,
              seed: int | None = None) -> tuple[list[float], tuple[int, int, int] | None]:
        """Queue the copy of a call's outputs into their staging rows; :meth:`record` follows. ``defer``:
        a single output already in its staging dtype and memory order on this device is not copied here;
        its (source, destination, bytes) is returned for the next graph replay's first node
        (inputs.CountedInputs), which the caller launches before anything else touches the output.
        ``seed`` (the call's, as :meth:`record` gets it): outputs too large to stage twice are summed by
        the harness's kernel where they lie, queued now, instead of copied and summed (:meth:`_in_place`)."""
        call = len(self.numels)
        tensors, layout, numels = [], [], []
        for j, o in enumerate(outputs):
            if not isinstance(o, torch.Tensor):
                self.scalars[(call, j)] = float(o)
                numels.append(1.0)
                layout.append(None)
                continue
            x = o.detach() if o.requires_grad else o
            dtype = x.dtype
            if dtype.is_complex:
                x = torch.view_as_real(x)
                dtype = x.dtype
            shape = x.shape
            n = shape.numel()
            if x.is_contiguous():  # the usual case: staged as it is, no view made
                order = tuple(range(x.dim()))
                tensors.append(x)
            else:  # dense in another order: its permuted view is contiguous, so a plain copy below
                order = self._order(x)
                tensors.append(x.permute(order))
            numels.append(float(n))
            layout.append((shape, n, dtype if dtype.is_floating_point else torch.float64, order))
        key = tuple(layout)
        # a layout staged already was judged: the usual small output pays no second look per call
        if seed is not None and key != self.layout and self._in_place(layout, tensors, seed, call):
            return numels, None
        if key != self.layout or len(self.seeds) == self.capacity:
            self._flush()
            self.layout, self.first = key, call
            self.capacity = self._rows()
            entries = [entry for entry in layout if entry is not None]
            self.stage = [torch.empty((self.capacity, n), dtype=d, device=self.device) for _, n, d, _ in entries]
            # Every row's view, in the outputs' shape as laid out in memory, made once per buffer, not per call.
            self.rows = [buf.view(self.capacity, *(shape[d] for d in order)).unbind(0)
                         for buf, (shape, _, _, order) in zip(self.stage, entries)]
        row = len(self.seeds)
        if defer and len(tensors) == 1 and len(outputs) == 1:
            x, target = tensors[0], self.rows[0][row]
            if x.dtype == target.dtype and x.device == self.device and x.is_contiguous() and x.shape == target.shape:
                return numels, (x.data_ptr(), target.data_ptr(), x.numel() * x.element_size())
        for rows, x in zip(self.rows, tensors):
            rows[row].copy_(x)  # one launch, strides and integer -> float64 included
        return numels, None

    def _in_place(self, layout: list[Any], tensors: list[torch.Tensor], seed: int, call: int) -> bool:
        """Sum this call's outputs where they lie, when a staging buffer would hold one call only (each
        output then was copied, and its copy summed, before the next call): the same sums, bit for bit, from
        the same point of the stream, without the copy, which took 23.6 ms of L1-87's 115 ms timed batch on
        an H200. Only on the harness's kernel, for outputs of the
        four float dtypes it reads, dense in memory order."""
        entries = [entry for entry in layout if entry is not None]
        if (self.kernels is None or not entries or 2 * _call_bytes(entries) <= self.stage_bytes
                or any(x.device != self.kernels.device or x.dtype not in self.kernels.sum_dtypes or not x.is_contiguous()
                       for x in tensors)):
            return False
        self._flush()  # the calls staged before this one keep their place in the table
        self.layout = None
        if self.offset is None:
            self.offset = torch.empty(1, dtype=torch.int64, device=self.device)
        self.offset.fill_(seed % SHIFT)  # a launch, not a copy from the host that would wait for the device
        columns = [self._kernel_sums(x.view(1, -1), shape, order, self.offset)
                   for x, (shape, _, _, order) in zip(tensors, entries)]
        self.table.append((call, torch.stack(columns, dim=1)))
        self.summed = True
        return True

    def _rows(self) -> int:
        """Calls a staging buffer holds: the batch, within stage_bytes (the sums need as much again)."""
        per_call = _call_bytes([e for e in (self.layout or ()) if e is not None])
        return max(1, min(self.calls, self.stage_bytes // max(1, 2 * per_call)))

    def _flush(self) -> None:
        if not self.seeds:
            return
        m, f64 = len(self.seeds), torch.float64
        offsets = torch.tensor([s % SHIFT for s in self.seeds], device=self.device)
        columns = []
        entries = [entry for entry in self.layout or () if entry is not None]
        for buf, (shape, _, _, order) in zip(self.stage, entries):
            x = buf[:m]
            if self.kernels is not None and x.is_cuda:
                columns.append(self._kernel_sums(x, shape, order, offsets))
                continue
            # float64 outputs (and integers, staged as float64) sum in float64; the rest in float32, whose
            # reductions run at full memory bandwidth (float64 accumulation of a float32 tensor ran 4x
            # slower on an H100, 15x on a CPU) and round within ACCUMULATION. On a CPU, sum |x| is a sum
            # of |x|: its float32 1-norm is not tree-shaped (7e-5 of itself off on 2^20 randn values),
            # its sums are (under 2e-7). The 2-norm only scales the allowance, so it may round more.
            acc = f64 if x.dtype == f64 else torch.float32
            l1 = torch.linalg.vector_norm(x, 1, dim=1, dtype=acc) if x.is_cuda else x.abs().sum(1, dtype=acc)
            w = self._weights(shape, order, offsets)
            columns.append(torch.stack([x.sum(1, dtype=acc), l1,
                                        (x * w).sum(1, dtype=acc), torch.linalg.vector_norm(x, 2, dim=1, dtype=acc)],
                                       dim=1).to(f64))
        sums = torch.stack(columns, dim=1) if columns else torch.empty((m, 0, 4), dtype=f64, device=self.device)
        self.table.append((self.first, sums))
        self.seeds, self.stage = [], []

    def _kernel_sums(self, x: torch.Tensor, shape: tuple[int, ...], order: tuple[int, ...],
                     offsets: torch.Tensor) -> torch.Tensor:
        """The four sums of ``_flush`` by the harness's kernel: the weights of :meth:`_weights`, element by
        element, from P in memory order and A at each call's offset along the longest dimension."""
        shape, order = tuple(shape) or (1,), tuple(order) or (0,)
        p, a = self._pattern(shape, order)
        longest = max(range(len(shape)), key=lambda d: (shape[d], -d))
        stride = math.prod(shape[d] for d in order[order.index(longest) + 1:])
        return self.kernels.sums(x, p, a, offsets, stride, shape[longest])

    def values(self) -> list[list[list[float]]]:
        """All calls' fingerprints, in one copy to the host."""
        self._flush()
        self.layout = None
        if not self.numels:
            return []
        blocks = [t for _, t in self.table]
        flat = torch.cat([b.reshape(-1, 4) for b in blocks]).tolist() if blocks else []
        out, k = [], 0
        for call, numels in enumerate(self.numels):
            row = []
            for j, n in enumerate(numels):
                if (call, j) in self.scalars:
                    v = self.scalars[(call, j)]
                    row.append([1.0, v, abs(v), v, v * v])
                else:
                    s, a, w, q = flat[k]
                    row.append([n, s, a, w, q * q])  # the 2-norm, squared: sum x^2
                    k += 1
            out.append(row)
        return out


def _call_bytes(entries: list[Any]) -> int:
    """Bytes one call's tensor outputs take staged (layout entries: shape, numel, staging dtype, order)."""
    return sum(n * d.itemsize for _, n, d, _ in entries)


def fingerprint(outputs: list[Any], seed: int, key: int = 0) -> list[list[float]]:
    """One call's fingerprints alone (see :class:`Fingerprints`)."""
    device = next((o.device for o in outputs if isinstance(o, torch.Tensor)), torch.device("cpu"))
    prints = Fingerprints(device, key)
    prints.add(outputs, seed)
    return prints.values()[0]
