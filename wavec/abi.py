"""Names fixed between the code wavec emits and the programs that read it (launcher, emulator).

Both sides import them from here, so neither imports the other: the emulator recognises codegen's
markers without importing codegen (DESIGN §2), and the runtime and the emulator agree on the launch
symbols without restating them.
"""

# The asm string of the empty volatile inline asm that fences a wgmma accumulator's registers
# (``codegen.hopper.wgmma.fence_operands``); the emulator runs it as the identity.
FENCE_OPERANDS = "// wavec: accumulator operands fenced"

# The symbol of a persistent grid that the launcher binds to the device's SM count.
SMS_NAME = "WAVEC_SMS"

# The bounds record of a kernel compiled with WAVEC_CHECK_BOUNDS (``runtime/bounds.py``): i64 words, one
# binding after the tensors and the tensor maps; the first lane to fail a check swaps FLAG from 0 to 1 and
# writes the others.
BOUNDS_FLAG, BOUNDS_CHECK, BOUNDS_LANE, BOUNDS_WG_X, BOUNDS_WG_Y, BOUNDS_WG_Z, BOUNDS_INDEX, BOUNDS_BOUND = range(8)
BOUNDS_RECORD_WORDS = 8

# An i64 scalar argument travels as two i32 launch constants: its own name (the low word), then this
# suffix on its name (the high word).
HIGH_WORD = ".hi"

# ``wc.arrive``'s inline PTX (``codegen/arrive.py``), parsed strictly by the emulator: the GPU-scope fence
# every thread runs before and after the arrival, and the one thread's counting atomic (the last of
# ``expected`` arrivals reads old == expected - 1 and leaves 0 behind: atom.inc's wrap).
FENCE_PTX = "fence.acq_rel.gpu;"
ARRIVE_PTX = "atom.acq_rel.gpu.global.inc.u32 $0, [$1], $2;"
