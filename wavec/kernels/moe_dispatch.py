"""The routing-aware choice of ``fused_experts`` (DESIGN §14, ``tuning/moe.py``): which fitted table serves a
call, the histogram-driven choice on the tensors' device, the static choice, and a report of what was
chosen how.

Requires: torch; a ``MoeTable`` from ``python -m wavec tune moe`` (the tuning cache, read once per process
per shape and device) or ``register_table``.

Guarantees: ``choose(table, ids, experts)`` builds the expert histogram of the local ids on their device
(``index_add_``: no host synchronisation), the block count of every token block, gathers the tabulated
least cost of each and takes the minimum: one int64 (cost and configuration index packed), read back
once, the only synchronisation of an eager step.  On CUDA that sequence is replayed from a CUDA graph
captured once per (table, ids capacity): a copy into the graph's input and the replay instead of six
launches; the capacity is a power of two (``bucket``), the unused tail holding a padding bin, so varying
batch sizes share a few graphs.  Under a CUDA-graph capture nothing can be read back: ``choose`` takes
the table's static choice there (counted, warned about once); ``choose_for_graph`` picks a configuration
from recent histograms before capture, for ``config=``.  Every call is counted in
``dispatch_report()``; a shape without a table falls back to the static rule and says so (a warning per
shape, and the count).
"""

from __future__ import annotations

import warnings
from collections import Counter
from typing import Any

from ..errors import ArgumentError
from ..tuning import moe as tm
from .fused_moe import SWAP_TARGET, MoeConfig, static_config
from .indexing import hopper_target

_TABLES: dict[str, tm.MoeTable | None] = {}
_BY_SIZES: dict[tuple, tuple[tm.MoeShape, tm.MoeTable | None]] = {}  # per-call lookups without formatting keys
_DEVICE_NAMES: dict[Any, str] = {}
_CHOOSERS: dict[tuple, Any] = {}
_COUNTS: Counter = Counter()
_MISSING: Counter = Counter()
_LAST: list[MoeConfig] = []  # the latest choice (the report's "last")


def device_name(device: Any) -> str:
    """The GPU's name (``torch.cuda.get_device_name``) for a CUDA device, ``"cpu"`` for the emulator's
    tensors; asked once per device."""
    if device not in _DEVICE_NAMES:
        import torch

        cuda = getattr(device, "type", None) == "cuda"
        _DEVICE_NAMES[device] = torch.cuda.get_device_name(device) if cuda else "cpu"
    return _DEVICE_NAMES[device]


def register_table(table: tm.MoeTable) -> None:
    """Serve ``table``'s shape on its device from now on in this process (the CLI after fitting, tests)."""
    _TABLES[table.key()] = table
    _BY_SIZES.clear()
    _forget_steps()
    for key in [k for k in _CHOOSERS if k[0] == table.key()]:
        del _CHOOSERS[key]


def forget_tables() -> None:
    """Drop the tables and choosers of this process (the next call reads the tuning cache again)."""
    _TABLES.clear()
    _BY_SIZES.clear()
    _CHOOSERS.clear()
    _forget_steps()


def lookup(experts: int, top_k: int, hidden: int, inter: int, dtype: str, device: Any) -> tuple:
    """``(MoeShape, its table or None)`` for a call's sizes on ``device``, memoised per sizes and device."""
    key = (experts, top_k, hidden, inter, dtype, device)
    hit = _BY_SIZES.get(key)
    if hit is None:
        shape = tm.MoeShape(experts, top_k, hidden, inter, dtype)
        hit = _BY_SIZES[key] = (shape, table_for(shape, device))
    return hit


def table_for(shape: tm.MoeShape, device: Any) -> tm.MoeTable | None:
    key = tm.table_key(shape, device_name(device))
    if key not in _TABLES:
        _TABLES[key] = tm.load(shape, device_name(device))
    return _TABLES[key]


def dispatch_report() -> dict:
    """Counts of the choices made in this process: ``routing_aware`` (a table's histogram choice),
    ``static_table`` (a table's balanced-routing choice), ``static_rule`` (``static_config``: asked for, or
    the fallback), ``fallback_no_table`` (routing-aware or static dispatch asked for a shape with no table),
    ``config`` (an explicit ``config=``), ``capture_static`` (routing-aware asked for under a CUDA-graph
    capture: the table's static choice), ``missing`` (table key -> fallbacks) and ``last`` (the latest
    choice's ``MoeConfig``, None before any)."""
    names = ("routing_aware", "static_table", "static_rule", "fallback_no_table", "config", "capture_static")
    return {**{k: _COUNTS[k] for k in names}, "missing": dict(_MISSING), "last": _LAST[-1] if _LAST else None}


def chose(cfg: MoeConfig) -> MoeConfig:
    """Record ``cfg`` as the latest choice (``dispatch_report()["last"]``) and return it."""
    _LAST[:] = [cfg]
    return cfg


def reset_report() -> None:
    _COUNTS.clear()
    _MISSING.clear()
    _LAST.clear()


def picker(s: Any, explicit: MoeConfig | None, dispatch: str, skip: int, device: Any) -> Any:
    """``pick(ids) -> MoeConfig`` for one ``fused_experts`` step (``moe_step``), with everything but the
    per-call count (and the routing-aware choice, from the local int32 ``ids``) decided now: the explicit
    ``config``, the table's static choice, the static rule where no table exists (warned about on its
    first call, as ``fallback``), or ``choose`` on the device.  ``register_table`` and ``forget_tables``
    drop the steps holding a picker."""
    if explicit is not None:
        return _Counted(explicit, ("config",), None)
    shape, table = lookup(s.experts, s.top_k, s.hidden, s.inter, s.dtype.name, device)
    if table is None:
        key = tm.table_key(shape, device_name(device))
        wgmma = hopper_target(None, device) == SWAP_TARGET  # (once per decided step: no cache)
        sms = _sms(device) if wgmma else 0
        rule = static_config(s.tokens, s.top_k, s.experts, wgmma=wgmma, inter=s.inter, hidden=s.hidden, sms=sms)
        return _Counted(rule, ("fallback_no_table", "static_rule"), key)
    if dispatch == "static":
        return _Counted(table.pool[table.static_index(s.tokens)].cfg, ("static_table",), None)
    experts, bins, tokens = s.experts, s.experts + skip, s.tokens

    def routing_aware(ids: Any) -> MoeConfig:
        return chose(choose(table, ids.view(-1), experts, bins, tokens))

    return routing_aware


def _sms(device: Any) -> int:
    import torch

    return int(torch.cuda.get_device_properties(device).multi_processor_count)


class _Counted:
    """A choice made once, counted (and recorded as the latest) on every call; ``missing``: the table key
    of a fallback (counted per key, warned about on its first call)."""

    __slots__ = ("cfg", "names", "missing")

    def __init__(self, cfg: MoeConfig, names: tuple[str, ...], missing: str | None) -> None:
        self.cfg, self.names, self.missing = cfg, names, missing

    def __call__(self, ids: Any) -> MoeConfig:
        for name in self.names:
            _COUNTS[name] += 1
        key = self.missing
        if key is not None:
            if not _MISSING[key]:
                warnings.warn(
                    f"fused_experts: no routing-aware table for {key}; using the static rule "
                    "(python -m wavec tune moe --model ... fits one; wavec.kernels.moe_dispatch.dispatch_report() "
                    "counts)",
                    stacklevel=4,
                )
            _MISSING[key] += 1
        _LAST[:] = [self.cfg]
        return self.cfg


def _forget_steps() -> None:
    """The ``fused_experts`` steps hold their shape's table (``picker``): a new or forgotten table
    rebuilds them."""
    from . import fused_moe

    fused_moe._DECIDED.clear()


def bucket(numel: int) -> int:
    """The ids capacity of a chooser: the next power of two (at least 16), so a server's varying batch
    sizes share a few captured graphs."""
    return max(16, 1 << (numel - 1).bit_length())


class _Chooser:
    """The histogram -> least-cost configuration sequence for one table, ids capacity ``size`` and device.
    Ids beyond a call's count are the padding bin ``bins`` (histogram bins: E, the skip expert, padding)."""

    def __init__(self, table: tm.MoeTable, size: int, experts: int, bins: int, device: Any) -> None:
        import torch

        bms = table.block_ms()
        most = max(-(-(size + min(experts, size) * (b - 1)) // b) for b in bms)
        self.index_of = [p.cfg for p in table.pool]
        self.experts, self.bins, self.device = experts, bins, device
        self.bm = torch.tensor(bms, dtype=torch.int32, device=device)[:, None]
        self.keys = torch.from_numpy(table.keys(most)).to(device)
        self.ones = torch.ones(size, dtype=torch.int32, device=device)
        self.graph: Any = None
        self.filled = 0  # ids of the last call in the graph's input (the rest holds the padding bin)

    def evaluate(self, ids: Any) -> Any:
        """The packed least key as a 0-d int64 tensor on the device (no synchronisation)."""
        import torch

        h = torch.zeros(self.bins + 1, dtype=torch.int32, device=self.device)
        h.index_add_(0, ids, self.ones[: ids.numel()])
        blocks = torch.div(h[None, : self.experts] + (self.bm - 1), self.bm, rounding_mode="floor").sum(1)
        return self.keys.gather(1, blocks[:, None]).min()

    def capture(self) -> None:
        """Record ``evaluate`` on a static ids buffer in a CUDA graph (warmed up on a side stream first)."""
        import torch

        self.static_ids = torch.full((self.ones.numel(),), self.bins, dtype=torch.int32, device=self.device)
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            self.evaluate(self.static_ids)
        torch.cuda.current_stream(self.device).wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.out = self.evaluate(self.static_ids)

    def __call__(self, ids: Any) -> int:
        if self.graph is None:
            return tm.unpack(self.evaluate(ids).item())
        n = ids.numel()
        self.static_ids[:n].copy_(ids)
        if n < self.filled:  # the previous call's longer ids back to padding
            self.static_ids[n : self.filled].fill_(self.bins)
        self.filled = n
        self.graph.replay()
        return tm.unpack(self.out.item())


def choose(table: tm.MoeTable, ids: Any, experts: int, bins: int, tokens: int) -> MoeConfig:
    """The routing-aware choice for the flat int32 local ``ids`` (``bins`` = E, or E + 1 with the skip
    expert, which costs nothing: its blocks exit at once); one read of the result.  Under a CUDA-graph
    capture nothing can be read back: the table's static choice for ``tokens``, counted as
    ``capture_static`` and warned about once (choose before capture: ``choose_for_graph``, ``config=``)."""
    import torch

    cuda = ids.is_cuda
    if cuda and torch.cuda.is_current_stream_capturing():
        if not _COUNTS["capture_static"]:
            warnings.warn(
                "fused_experts: routing-aware dispatch cannot read its choice during a CUDA-graph capture; "
                "the captured call uses the static choice (choose before capture with "
                "wavec.kernels.moe_dispatch.choose_for_graph and pass config=)",
                stacklevel=4,
            )
        _COUNTS["capture_static"] += 1
        return table.pool[table.static_index(tokens)].cfg
    key = (table.key(), bucket(ids.numel()), experts, bins, ids.get_device())  # int device: cheaper than .device
    chooser = _CHOOSERS.get(key)
    if chooser is None:
        chooser = _CHOOSERS[key] = _Chooser(table, key[1], experts, bins, ids.device)
        if cuda:
            chooser.capture()
    _COUNTS["routing_aware"] += 1
    return chooser.index_of[chooser(ids)]


def choose_for_graph(table: tm.MoeTable, histograms: Any) -> MoeConfig:
    """For CUDA-graph mode (choose before capture): the configuration of least total predicted time over
    ``histograms`` (recent steps' tokens per local expert: lists, or tensors on any device), on the host."""
    import numpy as np

    hists = [[int(v) for v in (h.tolist() if hasattr(h, "tolist") else h)] for h in histograms]
    if not hists:
        raise ArgumentError(kernel="choose_for_graph", arg="histograms", message="needs at least one histogram")
    for h in hists:
        if len(h) != table.shape.experts:
            raise ArgumentError(
                kernel="choose_for_graph", arg="histograms",
                message=f"each histogram holds {table.shape.experts} expert counts, got {len(h)}",
            )  # fmt: skip
    total = np.sum([table.predict(h) for h in hists], axis=0)
    return table.pool[int(total.argmin())].cfg


def histogram(topk_ids: Any, experts: int) -> Any:
    """Tokens per expert of ``topk_ids`` on its device (no synchronisation): what ``choose_for_graph`` takes."""
    import torch

    flat = topk_ids.reshape(-1)
    ones = torch.ones(flat.numel(), dtype=torch.int32, device=flat.device)
    return torch.zeros(experts, dtype=torch.int32, device=flat.device).index_add_(0, flat, ones)
