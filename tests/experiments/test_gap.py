"""gap: the kept-BN simulation is the unfolded conv, and without adaptation it is the
folded model up to the conv output's int8 grid."""

import numpy as np
import pytest

from forge_tflm import tflite_graph as tg
from forge_tflm.converter.options import ConvertOptions
from forge_tflm.deploy import model_input
from forge_tflm.experiments import gap
from forge_tflm.ops import RecalibOptions
from forge_tflm.testing import tiny_models
from tests.data import fixtures


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
  d = tmp_path_factory.mktemp("gap")
  src, _ = tiny_models.convert_tiny(d, ConvertOptions(recalib=RecalibOptions(window=16),
                                                       targets="recorded"),
                                    size=32)
  data_dir = fixtures.write_image_folder(str(d / "data"), fixtures.image_folder_entries(4))
  return str(d / "tiny.tflite"), src, data_dir


def test_kept_bn_conv_is_the_unfolded_conv(setup):
  path, src, data_dir = setup
  m = gap.gap_models(path, src, data_dir)
  artifact, folded, kept, kernels = m.artifact, m.folded, m.kept, m.kernels
  sites = gap.bn_sites(src, [n.name for n in folded.nodes])
  a, b = tg.load_model(artifact.model), tg.load_model(m.kept_bytes)
  for node in folded.nodes:
    conv_a = next(op for op in a.subgraphs[0].operators if node.input in op.outputs)
    conv_b = next(op for op in b.subgraphs[0].operators if node.input in op.outputs)
    wa, wb = (m.subgraphs[0].tensors[c.inputs[1]] for m, c in ((a, conv_a), (b, conv_b)))
    # Same int8 weights; per-channel scales multiplied by sigma / |gamma|.
    np.testing.assert_array_equal(tg.buffer_array(a, wa), tg.buffer_array(b, wb))
    ratio = sites[node.name].sigma / node.state.gamma_abs
    np.testing.assert_allclose(np.asarray(wb.quantization.scale),
                               np.asarray(wa.quantization.scale) * ratio, rtol=1e-6)
  # Not adapting, the kept-BN model computes what the folded one does, up to the
  # conv output's grid: same top-1 on most images, logits close.
  images = tiny_models.random_images(24, size=32, seed=9)
  x = model_input(artifact, images)
  ref = folded.dequantize_output(folded.run(x, mode="source"))
  kept.forge_kernel = lambda node, xb, m: kernels["kept"][node.name](xb, m)
  try:
    got = kept.dequantize_output(kept.run(x, mode="source"))
  finally:
    kept.forge_kernel = None
  assert (got.argmax(1) == ref.argmax(1)).mean() >= 0.9
  assert np.abs(got - ref).max() < 0.25 * np.abs(ref).max()


def test_float64_step_on_the_folded_model_matches_the_op_in_source_mode(setup):
  path, src, data_dir = setup
  m = gap.gap_models(path, src, data_dir)
  artifact, folded, kernels = m.artifact, m.folded, m.kernels
  x = model_input(artifact, tiny_models.random_images(8, size=32, seed=3))
  ref = folded.run(x, mode="source")
  folded.forge_kernel = lambda node, xb, m: kernels["folded"][node.name](xb, m)
  try:
    got = folded.run(x, mode="source")
  finally:
    folded.forge_kernel = None
  assert np.abs(got.astype(int) - ref).max() <= 1  # float64 vs the op's float32 rounding
