"""Ops that the Hopper passes create (no user stub): warpgroup MMAs on matrix descriptors and the
fences and commit/wait groups that order them.  Lowered by ``wavec/codegen/lowering_wgmma.py``."""

from __future__ import annotations

from .ops import Op


class MatrixDescriptor(Op):
    """A 64-bit ``wgmma`` matrix descriptor of one instruction tile of a shared tile (``args = (tile,)``;
    ``meta``: ``layout`` = the tile's origin, ``stage``, ``mma_role``)."""

    name = "matrix_descriptor"


class WarpgroupMMA(Op):
    """``wgmma.mma_async`` of a warpgroup: ``args = (A descriptor, B descriptor, accumulator)``."""

    name = "wgmma"


class WgmmaFence(Op):
    """``wgmma.fence``: orders register accesses (the accumulator) before the wgmmas that follow."""

    name = "wgmma_fence"


class WgmmaCommit(Op):
    """``wgmma.commit_group``: the wgmmas issued since the last commit form one group."""

    name = "wgmma_commit"


class WgmmaWait(Op):
    """``wgmma.wait_group``: wait until at most ``kwargs["pending"]`` wgmma groups are in flight; the
    accumulators in ``kwargs["retire"]`` (whose groups are now complete) become ordinary values."""

    name = "wgmma_wait"


class ProxyFence(Op):
    """``fence.proxy.async.shared::cta``: this thread's generic-proxy shared-memory writes become
    visible to the async proxy (wgmma reads, TMA) that a later barrier lets run."""

    name = "proxy_fence"


class WgmmaAccumulator(Op):
    """The accumulator of a wgmma chain in the instruction's register form (``args = (value,)``): what a
    loop carries when a wgmma group stays in flight across iterations."""

    name = "wgmma_accumulator"
