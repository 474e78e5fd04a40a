"""Splitting at host ops is exact; FORGE state is per stream."""

import re

import numpy as np
import pytest
from ai_edge_litert import schema_py_generated as schema
from ai_edge_litert.interpreter import Interpreter

from forge_tflm import tflite_graph as tg
from forge_tflm.artifact import InputContract
from forge_tflm.converter.options import ConvertOptions
from forge_tflm.ops import forge_recalib_c
from forge_tflm.runtime.segmented import KERNEL_MODES, SegmentedModel
from forge_tflm.testing import tiny_models

IDENTITY = "TEST_IDENTITY"


@pytest.fixture(scope="module")
def models(tmp_path_factory):
  _, r = tiny_models.convert_tiny(tmp_path_factory.mktemp("seg"), ConvertOptions())
  return r.plain_tflite, r.tflite


def cut_after_every_op(model_bytes: bytes) -> bytes:
  """Inserts an identity custom op after every op: every tensor crosses a cut."""
  model = tg.load_model(model_bytes)
  sg = model.subgraphs[0]
  code = tg.custom_opcode_index(model, IDENTITY)
  ops = []
  for op in sg.operators:
    ops.append(op)
    out = op.outputs[0]
    t = sg.tensors[out]
    pre = schema.TensorT()
    pre.shape, pre.shapeSignature, pre.type = t.shape, t.shapeSignature, t.type
    pre.quantization, pre.buffer = t.quantization, 0
    pre.name = tg.tensor_name(t) + "/pre"
    sg.tensors.append(pre)
    op.outputs[0] = len(sg.tensors) - 1
    ident = schema.OperatorT()
    ident.opcodeIndex, ident.inputs, ident.outputs = code, [op.outputs[0]], [out]
    ops.append(ident)
  sg.operators = ops
  return tg.save_model(model)


def run_unsplit(model_bytes, x, kernels):
  it = Interpreter(model_content=model_bytes,
                   experimental_op_resolver_type=KERNEL_MODES[kernels])
  it.resize_tensor_input(it.get_input_details()[0]["index"], list(x.shape))
  it.allocate_tensors()
  it.set_tensor(it.get_input_details()[0]["index"], x)
  it.invoke()
  return it.get_tensor(it.get_output_details()[0]["index"])


@pytest.mark.parametrize("kernels", ["reference", "optimized"])
@pytest.mark.parametrize("batch", [1, 5])
def test_identity_cuts_are_bit_exact(models, kernels, batch):
  plain, _ = models
  cut = cut_after_every_op(plain)
  calls = []

  def identity(x, op):
    calls.append(x.shape)
    return x.copy()

  seg = SegmentedModel(cut, kernels, host_kernels={IDENTITY: identity})
  x = seg.quantize_input(InputContract().to_float(tiny_models.random_images(batch, seed=3)))
  np.testing.assert_array_equal(seg.run(x), run_unsplit(plain, x, kernels))
  assert len(calls) == len(tg.load_model(plain).subgraphs[0].operators)


def test_unknown_custom_op_is_rejected(models):
  plain, _ = models
  with pytest.raises(ValueError, match="unsupported custom op 'TEST_IDENTITY'"):
    SegmentedModel(cut_after_every_op(plain))


def test_state_adapts_freezes_and_resets(models):
  _, forge = models
  seg = SegmentedModel(forge, "reference")
  assert len(seg.nodes) == 5
  initial = seg.get_state()
  x = seg.quantize_input(InputContract().to_float(tiny_models.random_images(8, seed=4)))
  seg.run(x, mode="frozen")
  for a, b in zip(initial, seg.get_state()):
    np.testing.assert_array_equal(a, b)
  first = seg.run(x, mode="adapt")
  assert any(not np.array_equal(a, b) for a, b in zip(initial, seg.get_state()))
  seg.reset()
  for a, b in zip(initial, seg.get_state()):
    np.testing.assert_array_equal(a, b)
  # A new stream after reset behaves exactly like a fresh model.
  np.testing.assert_array_equal(seg.run(x, mode="adapt"), first)
  fresh = SegmentedModel(forge, "reference")
  fresh.run(x, mode="adapt")
  for a, b in zip(fresh.get_state(), seg.get_state()):
    np.testing.assert_array_equal(a, b)


def test_input_validation(models):
  _, forge = models
  seg = SegmentedModel(forge)
  with pytest.raises(ValueError, match="must be int8"):
    seg.run(np.zeros((1, 16, 16, 3), np.float32))
  with pytest.raises(ValueError, match="does not match"):
    seg.run(np.zeros((1, 8, 8, 3), np.int8))
  with pytest.raises(ValueError, match="kernels must be"):
    SegmentedModel(forge, "fast")


@pytest.mark.parametrize("kernels", ["reference", "optimized"])
def test_fast_forge_path_matches_plain_host_step(models, kernels):
  """The C core writing into the next segment's input / reused buffers gives
  the same outputs and states as a fresh-array host step with the ansi core."""
  _, forge = models
  fast = SegmentedModel(forge, kernels)
  assert fast._direct  # Some FORGE outputs go straight into a segment input.
  slow = SegmentedModel(forge, kernels)
  slow.forge_kernel = lambda node, x, mode: forge_recalib_c(
      x, node.state, node.options, node.quant, mode=mode, variant="ansi")
  images = tiny_models.random_images(16, seed=5)
  results = []
  for i, (lo, hi) in enumerate([(0, 8), (8, 16), (0, 3), (3, 11), (11, 16)]):
    x = fast.quantize_input(InputContract().to_float(images[lo:hi]))
    mode = "frozen" if i == 2 else "adapt"
    y = fast.run(x, mode=mode)
    np.testing.assert_array_equal(y, slow.run(x, mode=mode))
    for a, b in zip(fast.get_state(), slow.get_state()):
      np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))
    results.append((y, y.copy()))
  for y, kept in results:  # Outputs are the caller's own arrays.
    np.testing.assert_array_equal(y, kept)


def test_set_state_refuses_what_would_corrupt_the_stream(models):
  """Issue 20: a NaN/inf state was accepted and pinned outputs at -128 forever."""
  _, forge = models
  seg = SegmentedModel(forge, "reference")
  good = seg.get_state()
  seg.set_state([s * 1.5 for s in good])  # Usable values are taken as given.
  np.testing.assert_array_equal(seg.get_state()[0], good[0] * np.float32(1.5))
  bad_cases = {
      "finite with variances >= 0": lambda s: np.where(np.arange(s.size) == 0, np.nan, s),
      "variances >= 0": lambda s: np.concatenate([s[:s.size // 2], -s[s.size // 2:]]),
      "takes": lambda s: s[:-1],
  }
  for why, corrupt in bad_cases.items():
    with pytest.raises(ValueError, match=why):
      seg.set_state([corrupt(good[0])] + good[1:])
  with pytest.raises(ValueError, match="states for 5 FORGE nodes"):
    seg.set_state(good[:2])
  # Nothing was half-applied.
  np.testing.assert_array_equal(seg.get_state()[0], good[0] * np.float32(1.5))
  np.testing.assert_array_equal(seg.get_state()[1], good[1] * np.float32(1.5))


def test_adapt_only_keeps_the_other_sites_as_converted(models):
  _, forge = models
  seg = SegmentedModel(forge, "reference")
  names = [n.name for n in seg.nodes]
  x = seg.quantize_input(InputContract().to_float(tiny_models.random_images(8, seed=5)))
  initial = seg.get_state()
  seg.adapt_only(names[1:2])
  out = seg.run(x, mode="adapt")
  changed = [not np.array_equal(a, b) for a, b in zip(initial, seg.get_state())]
  assert changed == [i == 1 for i in range(len(names))]
  # Equal to adapting that site while every other one runs in source mode.
  ref = SegmentedModel(forge, "reference")
  ref.forge_kernel = lambda node, xb, mode: node.op(
      xb, mode=mode if node.name == names[1] else "source")
  np.testing.assert_array_equal(out, ref.run(x, mode="adapt"))
  seg.reset()
  seg.adapt_only([])
  np.testing.assert_array_equal(seg.run(x, mode="adapt"), seg.run(x, mode="source"))
  seg.adapt_only(None)
  seg.reset()
  np.testing.assert_array_equal(seg.run(x, mode="adapt"),
                                SegmentedModel(forge, "reference").run(x, mode="adapt"))
  with pytest.raises(ValueError, match="unknown site"):
    seg.adapt_only(["nope"])


def test_set_state_keeps_int_states_exact(tmp_path):
  """arithmetic=int states are int32 Q16/Q12: set_state used to pass them through
  float32, which rounds values above 2^24 (a Q16 mean of 256 units is 2^24)."""
  opts = ConvertOptions(recalib=ConvertOptions().recalib.replace(arithmetic="int"))
  _, r = tiny_models.convert_tiny(tmp_path, opts)
  seg = SegmentedModel(r.tflite, "reference")
  good = seg.get_state()
  assert good[0].dtype == np.int32
  c = good[0].size // 2
  wanted = [s.copy() for s in good]
  wanted[0][0] = 2**24 + 1  # float32 would store 2^24
  wanted[0][c] = 2**29 + 3
  seg.set_state(wanted)
  for got, want in zip(seg.get_state(), wanted):
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)
  for bad, why in [(np.where(np.arange(2 * c) == 0, 2**31 - 1, wanted[0]), "|mu| <= 2^30"),
                   (np.where(np.arange(2 * c) == c, -1, wanted[0]), "variances >= 0"),
                   (wanted[0].astype(np.float32), "is int32")]:
    with pytest.raises(ValueError, match=re.escape(why)):
      seg.set_state([bad] + wanted[1:])
  np.testing.assert_array_equal(seg.get_state()[0], wanted[0])
