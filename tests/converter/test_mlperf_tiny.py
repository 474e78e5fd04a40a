"""MLPerf Tiny's ResNet-8, trained elsewhere: from its shipped int8 .tflite (targets
measured) and from its float legacy .h5 (targets recorded); raw 0..255 pixel input."""

import os

import numpy as np
import pytest

from forge_tflm import tflite_graph as tg
from forge_tflm.artifact import InputContract
from forge_tflm.converter.options import ConvertOptions
from forge_tflm.converter.pipeline import convert
from forge_tflm.converter.sites import ConversionError
from forge_tflm.data import load_dataset
from forge_tflm.ops import RecalibOptions

PIXELS = InputContract("range", 0.0, 255.0)


@pytest.fixture
def calibration(shared_cifar10):
  return load_dataset("cifar10", "train", shared_cifar10).random_subset(200, seed=0)


def test_shipped_int8_model_converts(shared_mlperf_ic, calibration, tmp_path):
  result = convert(os.path.join(shared_mlperf_ic, "pretrainedResnet_quant.tflite"),
                   str(tmp_path / "r8.tflite"), calibration,
                   ConvertOptions(input_contract=PIXELS))
  m = result.manifest
  assert len(m.sites) == 9 and m.channels == 336  # 7 folded BNs and 2 shortcut convs.
  assert [s.name for s in m.sites][:2] == ["batch_normalization", "batch_normalization_1"]
  assert "conv2d_5" in [s.name for s in m.sites]
  assert m.targets == {"source": "measured", "images": 200}
  # FORGE off is the shipped model bit for bit (94% of top-1 predictions with the
  # widened pre-activation grids this replaced).
  p = m.parity["source_mode_vs_input"]
  assert p["top1_agreement"] == 1.0 and p["max_output_difference"] == 0.0


def test_a_diverging_artifact_is_refused_with_its_first_site(shared_mlperf_ic, calibration,
                                                             tmp_path):
  """An eps far above the channels' variances squeezes every site: refused, nothing
  written, the first site named."""
  with pytest.raises(ConversionError, match=r"below 99%; first diverging site"
                                            r" 'batch_normalization'"):
    convert(os.path.join(shared_mlperf_ic, "pretrainedResnet_quant.tflite"),
            str(tmp_path / "r8.tflite"), calibration,
            ConvertOptions(input_contract=PIXELS, eps_from_bn=False,
                           recalib=RecalibOptions(window=640, eps=100.0)))
  assert os.listdir(tmp_path) == []


def test_legacy_h5_converts_without_shape_ops(shared_mlperf_ic, calibration, tmp_path):
  """Its Flatten converts as SHAPE -> STRIDED_SLICE -> PACK -> RESHAPE, which devices
  refuse (failed before converter/static_shapes.py): folded to a constant [-1, 64]."""
  result = convert(os.path.join(shared_mlperf_ic, "pretrainedResnet.h5"),
                   str(tmp_path / "r8.tflite"), calibration,
                   ConvertOptions(input_contract=PIXELS))
  m = result.manifest
  assert len(m.sites) == 7 and m.targets["source"] == "measured"
  model = tg.load_model(result.tflite)
  ops = [tg.op_name(model, op) for op in model.subgraphs[0].operators]
  assert "SHAPE" not in ops and "PACK" not in ops
  reshape = next(op for op in model.subgraphs[0].operators
                 if tg.op_name(model, op) == "RESHAPE")
  shape = tg.buffer_array(model, model.subgraphs[0].tensors[reshape.inputs[1]])
  np.testing.assert_array_equal(shape, [-1, 64])
