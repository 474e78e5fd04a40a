"""What one FORGE_RECALIB node costs in a TFLite-Micro arena on a 32-bit target.

Every figure comes from the C side (forge_recalib.h through the binding): the state
block (forge_recalib_state_bytes: 8 B per channel), the kernel's op data and
TFLM's per-node bookkeeping (both checked against the real struct layouts by a
static_assert in every 32-bit build of the kernel), and the scratch the core asks for. Measured arenas per target are in
benchmarks/results/mcu_memory.md (benchmarks/bench_mcu_memory.py).
"""

from __future__ import annotations

import dataclasses

from forge_tflm.ops.options import core

def state_bytes(channels: int) -> int:
  """SRAM bytes of one op's state block (the kernel's allocation)."""
  return core().state_bytes(channels)


def _aligned(n: int) -> int:
  a = core().ARENA_ALIGN
  return (n + a - 1) // a * a


@dataclasses.dataclass(frozen=True)
class NodeMemory:
  """Arena bytes of one FORGE_RECALIB node with `channels` channels (32-bit TFLM).

  state, op_data: persistent buffers the kernel allocates (each rounded up to TFLM's
  16-byte buffer alignment in the arena); tflm_node: TFLM's NodeAndRegistration, the
  TfLiteEvalTensors of y, beta and gamma_abs and a scratch handle; scratch_*:
  non-persistent, shared with every other op's (it adds to the arena only if it
  exceeds the model's peak); the table path needs scratch_table.
  """
  channels: int

  @property
  def state_per_channel(self) -> int:
    return state_bytes(1)

  @property
  def state(self) -> int:
    return state_bytes(self.channels)

  @property
  def op_data(self) -> int:
    return core().OP_DATA_BYTES_ILP32

  @property
  def tflm_node(self) -> int:
    return core().TFLM_NODE_BYTES_ILP32

  @property
  def persistent_arena(self) -> int:
    """What the node adds to the arena's persistent (tail) section."""
    return _aligned(self.state) + _aligned(self.op_data) + self.tflm_node

  @property
  def scratch_affine(self) -> int:
    return core().scratch_bytes(self.channels)[0]

  @property
  def scratch_table(self) -> int:
    return core().scratch_bytes(self.channels)[1]

  def to_json(self) -> dict:
    return {"state_bytes": self.state, "state_bytes_per_channel": self.state_per_channel,
            "op_data_bytes_32bit": self.op_data,
            "tflm_node_bytes_32bit": self.tflm_node,
            "arena_bytes_32bit": self.persistent_arena,
            "scratch_bytes": self.scratch_table, "scratch_bytes_affine": self.scratch_affine}
