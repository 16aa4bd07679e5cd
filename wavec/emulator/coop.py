"""Cooperating threads of control inside one workgroup (warp specialization).

The emulator runs a workgroup's lanes in lockstep (``State.mask`` for divergence).  A producer warpgroup
that blocks on the consumers' releases cannot run in lockstep with them, so ``scf.if`` runs the two
branches of a warpgroup-uniform split whose regions both contain ``mbarrier.try_wait.parity`` as two
threads of control (``ops_scf``): Python threads of which exactly one runs at a time (a baton), each with
its own saved ``State.mask``.  A thread hands the baton on only where a ``try_wait.parity`` cannot complete
yet (:func:`block_until`); a wait that can never complete is a deadlock, an ``EmulatorError`` naming every
blocked wait.  Progress (an mbarrier arrival, a copy issued) is counted so that a round of hand-overs in
which nobody moved is recognised as a deadlock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np

from wavec.emulator.interp import Instr, State, run_block
from wavec.errors import EmulatorError


class _Abort(BaseException):
    """Unwinds a parked thread once another one failed."""


class Baton:
    """The threads of one split: ``turn`` says which one runs (-1: the thread that started them)."""

    def __init__(self, st: State, masks: list[np.ndarray]) -> None:
        self.st, self.masks = st, list[np.ndarray | None](masks)
        self.cv = threading.Condition()
        self.turn, self.alive = -1, [True] * len(masks)
        self.blocked: list[str | None] = [None] * len(masks)
        self.progress = 0
        self.error: BaseException | None = None
        self.current = 0

    def _next(self, me: int) -> int:
        n = len(self.alive)
        for k in range(1, n + 1):
            j = (me + k) % n
            if self.alive[j]:
                return j
        return -1

    def _give(self, to: int) -> None:
        with self.cv:
            self.turn = to
            self.cv.notify_all()

    def _take(self, me: int) -> None:
        with self.cv:
            self.cv.wait_for(lambda: self.turn == me or self.error is not None)
        if self.error is not None and self.turn != me:
            raise _Abort
        self.current = me
        self.st.mask = self.masks[me]

    def switch(self, me: int) -> None:
        """Hand the baton to the next live thread and wait for it to come back."""
        self.masks[me] = self.st.mask
        self._give(self._next(me))
        self._take(me)

    def worker(self, me: int, instrs: list[Instr]) -> None:
        try:
            self._take(me)
            run_block(self.st, instrs)
        except _Abort:
            return
        except BaseException as e:  # noqa: BLE001 - handed to the starting thread
            with self.cv:
                self.error = self.error or e
        with self.cv:
            self.alive[me] = False
            self.turn = -1 if self.error is not None else self._next(me)
            self.cv.notify_all()


def run_split(st: State, branches: list[tuple[np.ndarray, list[Instr]]]) -> None:
    """Run each (mask, instructions) branch as a cooperating thread; the first starts; returns when all
    finished (re-raising the first error)."""
    if st.baton is not None:
        raise EmulatorError(message="nested warp-specialized splits are not emulated")
    saved = st.mask
    baton = st.baton = Baton(st, [m for m, _ in branches])
    threads = [
        threading.Thread(target=baton.worker, args=(i, instrs), daemon=True) for i, (_m, instrs) in enumerate(branches)
    ]
    for t in threads:
        t.start()
    baton._give(0)
    with baton.cv:
        baton.cv.wait_for(lambda: baton.turn == -1 and (baton.error is not None or not any(baton.alive)))
    for t in threads:
        t.join()
    st.baton = None
    st.mask = saved
    if baton.error is not None:
        raise baton.error


def note_progress(st: State) -> None:
    """An mbarrier changed (arrival, expected bytes, copy): a blocked wait may now complete."""
    baton = st.baton
    if baton is not None:
        baton.progress += 1


def block_until(st: State, ready: Callable[[], bool], what: str) -> None:
    """Inside a split: hand the baton on until ``ready()``; outside one, return at once (the caller reports a
    wait that can never complete).  Raises a deadlock error when a whole round of the other threads made no
    progress, or none is left."""
    baton = st.baton
    if baton is None:
        return
    me = baton.current
    while not ready():
        baton.blocked[me] = what
        before = baton.progress
        if baton._next(me) in (me, -1):
            _deadlock(baton, me)
        baton.switch(me)
        if baton.progress == before and not ready():
            _deadlock(baton, me)
    baton.blocked[me] = None


def _deadlock(baton: Baton, me: int) -> None:
    waits = [f"thread {i}: {w}" for i, w in enumerate(baton.blocked) if w is not None and (baton.alive[i] or i == me)]
    raise EmulatorError(
        message="deadlock between the warp-specialized threads (no arrival or copy can complete "
        "any of their waits, which can never complete): " + "; ".join(waits)
    )
