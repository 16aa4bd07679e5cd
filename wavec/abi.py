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
