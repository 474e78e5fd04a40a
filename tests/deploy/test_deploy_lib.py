"""forge_tflm.deploy pieces that need no build: checksum, output parser, arrays."""

import os

import numpy as np
import pytest

from forge_tflm import deploy
from tests.conftest import SHARED_CIFAR10, SHARED_DATASETS


def _checksum_loop(data: bytes) -> int:
  """The C loop of ForgeAppChecksum, literally."""
  h = 0
  for i, b in enumerate(data):
    w = ((i * 2654435761) & 0xFFFFFFFF) | 1
    h = (h + b * w) & 0xFFFFFFFF
  return h


def test_checksum_matches_the_c_definition_and_sees_every_byte():
  rng = np.random.default_rng(0)
  x = rng.integers(-128, 128, size=(3, 5, 7), dtype=np.int8)
  assert deploy.checksum(x) == _checksum_loop(x.tobytes())
  assert deploy.checksum(np.float32([1.5, -2.0])) == _checksum_loop(
      np.float32([1.5, -2.0]).tobytes())
  base = deploy.checksum(x)
  flat = x.reshape(-1)
  for i in range(flat.size):
    for delta in (1, -1, 127):
      y = flat.copy()
      y[i] = np.int8((int(y[i]) + delta + 128) % 256 - 128)
      if y[i] != flat[i]:
        assert deploy.checksum(y) != base


def test_parse_app_output_reads_records_and_skips_noise():
  text = "\n".join([
      "I (123) boot: some log line",
      "forge_app version=1 model_bytes=10 ops=3 forge_ops=1 input=1x2x2x3 input_bytes=12"
      " output=1x3 clock_hz=1000 mode=adapt trace=all",
      "op index=0 name=CONV_2D forge=0",
      "op index=1 name=FORGE_RECALIB forge=1",
      "op index=2 name=FULLY_CONNECTED forge=0",
      "mem arena_size=100 arena_used=50 forge_persistent=8 forge_scratch=4",
      "img index=0 pred=2 logits=-1,0,5 ticks=7 forge=0000000a state=ffffffff"
      " trace=00000001,0000000a,00000003",
      "img index=1 pred=0 logits=4,0,-5 ticks=9 forge=0000000b state=00000000"
      " trace=00000002,0000000b,00000004",
      "cost index=0 name=CONV_2D calls=2 ticks=10",
      "cost_type name=CONV_2D ops=1 ticks=10",
      "done images=2 status=ok ticks=16",
  ])
  run = deploy.parse_app_output(text)
  assert run.ok and run.clock_hz == 1000
  assert run.ops == ["CONV_2D", "FORGE_RECALIB", "FULLY_CONNECTED"]
  assert run.forge_ops == [1]
  assert run.mem["arena_used"] == 50
  np.testing.assert_array_equal(run.logits, [[-1, 0, 5], [4, 0, -5]])
  np.testing.assert_array_equal(run.predictions, [2, 0])
  np.testing.assert_array_equal(run.forge_checksums, [[10], [11]])
  np.testing.assert_array_equal(run.state_checksums, [[0xFFFFFFFF], [0]])
  assert run.op_checksums.shape == (2, 3)
  assert run.cost_type["CONV_2D"]["ticks"] == 10


def test_quantize_multiplier_as_tflite():
  from forge_tflm.runtime.tflm_kernels import quantize_multiplier
  assert quantize_multiplier(0.5) == (1 << 30, 0)
  assert quantize_multiplier(1.0) == (1 << 30, 1)
  m, s = quantize_multiplier(0.0123)
  assert abs(m * 2.0 ** (s - 31) - 0.0123) < 1e-9


def test_write_c_arrays(tmp_path):
  x = np.arange(-6, 6, dtype=np.int8).reshape(2, 2, 3)
  header, source = deploy.write_c_arrays(str(tmp_path), b"\x01\x02\x03", x, np.array([3, 7]))
  text = open(source).read()
  assert "alignas(16) const uint8_t forge_app_model[] = {\n  0x01, 0x02, 0x03,\n};" in text
  assert "forge_app_num_images = 2;" in text and "forge_app_image_bytes = 6;" in text
  assert "-6, -5, -4" in text and "forge_app_labels[] = {3, 7};" in text
  assert "extern const int8_t forge_app_images[];" in open(header).read()


@pytest.mark.skipif(not os.path.exists(SHARED_CIFAR10), reason="CIFAR-10 not in ../shared")
@pytest.mark.parametrize("kind", ["shuffled", "sorted", "dirichlet"])
def test_device_stream_in_a_label_order_is_the_evaluators(kind):
  """export-firmware --label_order: the images, in the order `forge_tflm eval
  --label_order=... --batch_size=1` presents ordering k of the same subset."""
  from forge_tflm.data import load_dataset
  from forge_tflm.evaluation import field_streams
  from forge_tflm.evaluation.streams import generated_streams

  data_dir = os.path.join(SHARED_DATASETS, "cifar10")
  order = field_streams.LabelOrder(kind, 0.01 if kind == "dirichlet" else None, 1)
  got = deploy.corrupted_stream(data_dir, "fog", 5, limit=40, seed=3, ordering_index=1,
                                label_order=order)
  clean = load_dataset("cifar10", "test", data_dir).random_subset(40, 3)
  want = field_streams.reset_each_shift(list(generated_streams(clean, ["fog"], 5, 3)),
                                        order)[0]
  k = want.order(1, 3)
  np.testing.assert_array_equal(got.images, want.images[k])
  np.testing.assert_array_equal(got.labels, want.labels[k])
  assert got.name == ("fog-5" if kind == "shuffled" else f"fog-5 ({order.spec})")
  if kind == "sorted":  # One run per class present.
    assert np.count_nonzero(np.diff(got.labels)) == len(np.unique(got.labels)) - 1
