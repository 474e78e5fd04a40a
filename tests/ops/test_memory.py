"""forge_tflm.ops.memory: per-node arena accounting from the C header's constants."""

from forge_tflm.ops import options
from forge_tflm.ops.memory import NodeMemory


def test_state_is_8_bytes_per_channel_and_persistent_bytes_are_aligned():
  m = NodeMemory(64)
  assert m.state == 512
  align = options.core().ARENA_ALIGN
  assert align == 16 and m.op_data % 4 == 0
  # Each persistent buffer is rounded up to the arena alignment; TFLM's node
  # bookkeeping lives in arrays it allocates once (no per-node rounding).
  want = -(-m.state // align) * align + -(-m.op_data // align) * align + m.tflm_node
  assert m.persistent_arena == want
  assert NodeMemory(3).persistent_arena == 32 + -(-m.op_data // align) * align + m.tflm_node


def test_scratch_is_the_cores_request():
  m = NodeMemory(16)
  assert (m.scratch_affine, m.scratch_table) == options.core().scratch_bytes(16)
  assert m.scratch_affine == 24 * 16 and m.scratch_table == 280 * 16
  j = m.to_json()
  assert j["state_bytes"] == 128 and j["arena_bytes_32bit"] == m.persistent_arena
