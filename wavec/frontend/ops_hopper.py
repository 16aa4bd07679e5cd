"""Ops that the Hopper passes create (no user stub): warpgroup MMAs on matrix descriptors and the
fences and commit/wait groups that order them.  Lowered by ``wavec/codegen/hopper/wgmma.py``."""

from __future__ import annotations

from .ops import Op


class _WgmmaOp(Op):
    lowering = "wavec.codegen.hopper.wgmma"


class _TmaOp(Op):
    lowering = "wavec.codegen.hopper.tma"


class MatrixDescriptor(_WgmmaOp):
    """A 64-bit ``wgmma`` matrix descriptor of one instruction tile of a shared tile (``args = (tile,)``;
    ``meta``: ``layout`` = the tile's origin, ``stage``, ``mma_role``)."""

    name = "matrix_descriptor"
    emulated_ops = ("memref.extract_aligned_pointer_as_index", "arith.shrui", "arith.ori")


class WarpgroupMMA(_WgmmaOp):
    """``wgmma.mma_async`` of a warpgroup: ``args = (A descriptor, B descriptor, accumulator)``."""

    name = "wgmma"
    # inline PTX for a register A, whose tf32 elements are rounded by cvt.rna first
    emulated_ops = ("nvvm.wgmma.mma_async", "llvm.insertvalue", "llvm.extractvalue", "llvm.inline_asm",
                    "nvvm.convert.float.to.tf32")  # fmt: skip


class WgmmaFence(_WgmmaOp):
    """``wgmma.fence``: orders register accesses (the accumulator) before the wgmmas that follow."""

    name = "wgmma_fence"
    emulated_ops = ("nvvm.wgmma.fence.aligned",)


class WgmmaCommit(_WgmmaOp):
    """``wgmma.commit_group``: the wgmmas issued since the last commit form one group."""

    name = "wgmma_commit"
    emulated_ops = ("nvvm.wgmma.commit.group.sync.aligned",)


class WgmmaWait(_WgmmaOp):
    """``wgmma.wait_group``: wait until at most ``kwargs["pending"]`` wgmma groups are in flight; the
    accumulators in ``kwargs["retire"]`` (whose groups are now complete) become ordinary values."""

    name = "wgmma_wait"
    emulated_ops = ("nvvm.wgmma.wait.group.sync.aligned",)


class ProxyFence(_WgmmaOp):
    """``fence.proxy.async.shared::cta``: this thread's generic-proxy shared-memory writes become
    visible to the async proxy (wgmma reads, TMA) that a later barrier lets run."""

    name = "proxy_fence"
    emulated_ops = ("nvvm.fence.proxy",)


class WgmmaAccumulator(_WgmmaOp):
    """The accumulator of a wgmma chain in the instruction's register form (``args = (value,)``): what a
    loop carries when a wgmma group stays in flight across iterations."""

    name = "wgmma_accumulator"
    emulated_ops = ("llvm.insertvalue",)


class MBarrierInit(_TmaOp):
    """Before a TMA-pipelined loop over ``kwargs["dim"]``: ``count`` "full" mbarriers (one per stage, one
    arrival) and, when ``empty_arrivals`` > 0, as many "empty" ones (one arrival per warp), initialised by
    one thread, then ``fence.mbarrier_init`` and a barrier.  The loop's mbarrier ops name it in
    ``meta["mbarriers"]``."""

    name = "mbarrier_init"
    emulated_ops = ("nvvm.mbarrier.init", "nvvm.fence.mbarrier.init", "gpu.barrier")


class MBarrierWait(_TmaOp):
    """Wait until the mbarrier of stage ``kwargs["stage"]`` completes the phase of parity
    ``kwargs["parity"]`` (``mbarrier.try_wait.parity`` in a loop): the TMA boxes of that stage landed.  With
    ``kwargs["stop"]`` (``intra_warpgroup_overlap``) only while ``kwargs["iteration"] < stop``."""

    name = "mbarrier_wait"
    emulated_ops = ("nvvm.mbarrier.try_wait.parity", "scf.while", "scf.if")


class TmaFill(_TmaOp):
    """Fill pipeline stage ``kwargs["stage"]`` with TMA (``args``: (global memory, shared tile) pairs,
    flattened).  Thread 0, while ``iteration < stop``: with empty mbarriers and ``iteration >= refill_from``
    it waits for parity ``empty_parity`` of the stage's empty mbarrier, then ``arrive.expect_tx`` on the
    full one and one ``cp.async.bulk.tensor`` per 128-byte-wide box.  ``meta``: ``iv_subs`` (the tiles'
    iteration), ``maps`` (each pair's tensor map), ``mbarriers``."""

    name = "tma_fill"
    emulated_ops = ("nvvm.mbarrier.arrive.expect_tx", "nvvm.cp.async.bulk.tensor.shared.cluster.global")


class MBarrierArrive(_TmaOp):
    """Lane 0 of every warp arrives on the "empty" mbarrier of stage ``kwargs["stage"]`` (the warp's wgmma
    group that read it has retired) when ``kwargs["iteration"] >= kwargs["first"]``."""

    name = "mbarrier_arrive"
    emulated_ops = ("nvvm.mbarrier.arrive",)


class WarpSpecialize(_TmaOp):
    """The producer/consumer split of a warp-specialized TMA loop (``passes/hopper/warp_specialize.py``):
    later root nodes run in the consumers (threads ``< consumers``); the extra producer warpgroup runs
    ``subgraph`` (one ``TmaFill`` of iteration ``$ARG_<dim>``) over iterations ``start .. stop - 1``.
    ``args``: the root nodes it captures; ``regs``: (producer, consumer) ``setmaxnreg`` counts."""

    name = "warp_specialize"
    emulated_ops = ("nvvm.setmaxregister", "scf.if", "scf.for")


class PersistentTiles(Op):
    """The tile loop of a persistent grid (``passes/hopper/persistent_grid.py``): every root-graph node after it
    runs once per output tile ``$TILE`` in ``range(block id, kwargs["tiles"], grid size)``, with
    ``$TILE_COUNT`` = tiles this workgroup finished before and ``$WG0``/``$WG1`` from
    ``kwargs["remap"]``; ``kwargs["barrier"]``: a workgroup barrier at the start of every tile."""

    name = "persistent_tiles"
    lowering = "wavec.codegen.hopper.persistent"
    emulated_ops = ("scf.for",)


class NamedBarrier(Op):
    """One half of the consumer warpgroups' ping-pong (``passes/hopper/pingpong_warpgroups.py``): ``bar.sync``
    (``kwargs["action"] == "sync"``) or ``bar.arrive`` on named barrier ``1 + w`` ("mine", warpgroup ``w``'s
    turn) or ``2 - w`` ("other"), ``kwargs["threads"]`` threads each; with ``kwargs["only"]`` only that
    consumer warpgroup executes it."""

    name = "named_barrier"
    lowering = "wavec.codegen.hopper.pingpong"
    emulated_ops = ("nvvm.barrier", "nvvm.barrier.arrive", "scf.if")
