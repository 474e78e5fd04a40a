"""`convert` from a full-int8 .tflite: targets measured, sites = every conv."""

import dataclasses
import json
import os

import keras
import numpy as np
import pytest
from keras import layers

from forge_tflm import model_check
from forge_tflm import tflite_graph as tg
from forge_tflm.artifact import Artifact, InputContract
from forge_tflm.converter import preact
from forge_tflm.converter.calibration import record_bn_outputs
from forge_tflm.converter.frontend_keras import find_keras_sites
from forge_tflm.converter.frontend_tflite import TfliteFrontend, site_name
from forge_tflm.converter.options import ConvertOptions
from forge_tflm.converter.pipeline import convert
from forge_tflm.converter.quantize import convert_keras
from forge_tflm.converter.sites import ConversionError
from forge_tflm.data.imageset import ImageSet
from forge_tflm.runtime.segmented import SOURCE, SegmentedModel
from tests.converter import tiny_models

N = 64


def _calibration(n=N, seed=0):
  return ImageSet(tiny_models.random_images(n, seed=seed), np.zeros(n, np.int64), ("x",),
                  "generated")


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
  """The tiny ResNet as a user ships it: the plain int8 model only (and, to compare,
  the float model and the artifact with recorded targets)."""
  d = tmp_path_factory.mktemp("int8")
  model = tiny_models.tiny_resnet()
  src = str(d / "tiny.keras")
  model.save(src)
  convert(src, str(d / "recorded.tflite"), _calibration(),
          plain_output=str(d / "plain.tflite"))
  return model, str(d / "plain.tflite"), d


@pytest.fixture(scope="module")
def measured(plain):
  _, path, d = plain
  out = str(d / "measured.tflite")
  return convert(path, out, _calibration(), command="forge_tflm convert"), out


def test_every_conv_is_a_site_named_after_its_bn(measured):
  result, _ = measured
  m = result.manifest
  assert m.source["frontend"] == "tflite"
  assert m.targets == {"source": "measured", "images": N}
  assert {s.name: (s.kind, s.options.activation, s.channels) for s in m.sites} == \
      tiny_models.TINY_SITES


def test_measured_targets_are_the_float_models_bn_moments(plain, measured):
  """beta, |gamma| = the mean and std of each BN's output (the pre-activation) on the
  calibration images, as the float model computes it, up to int8 rounding."""
  model, _, _ = plain
  result, out = measured
  x = _calibration().images.astype(np.float32) / 255.0
  _, sink = record_bn_outputs(model, find_keras_sites(model), x)
  mt = tg.load_model(result.tflite)
  for s in result.manifest.sites:
    node = model_check.forge_node(mt, s.op_index, out)
    bn = np.concatenate(sink[s.name]).reshape(-1, s.channels)
    std = bn.std(0)
    np.testing.assert_allclose(node.beta, bn.mean(0), atol=0.05 * std.mean())
    np.testing.assert_allclose(node.gamma_abs, std, rtol=0.05, atol=0.02 * std.mean())


def test_source_mode_reproduces_the_input_model(plain, measured):
  _, path, _ = plain
  result, _ = measured
  p = result.manifest.parity["source_mode_vs_input"]
  assert p["top1_agreement"] >= 0.95 and p["min_agreement"] == 0.9
  x = SegmentedModel(open(path, "rb").read())
  f = SegmentedModel(result.tflite)
  images = x.quantize_input(tiny_models.random_images(16, seed=5) / np.float32(255))
  same = x.run(images, mode=SOURCE).argmax(1) == f.run(images, mode=SOURCE).argmax(1)
  assert same.mean() >= 0.9


def test_the_artifact_loads_where_it_is_used(measured):
  _, out = measured
  artifact = Artifact.load(out, require_manifest=True)
  assert artifact.manifest.targets["source"] == "measured"
  SegmentedModel.from_artifact(artifact)


def test_sites_are_selectable_by_name(plain, tmp_path):
  _, path, _ = plain
  result = convert(path, str(tmp_path / "two.tflite"), _calibration(),
                   ConvertOptions(sites=("b1_bn", "dw_bn")))
  assert [s.name for s in result.manifest.sites] == ["b1_bn", "dw_bn"]
  assert len(result.manifest.bn_sites_found) == 5


def test_refuses_a_wrong_input_contract(plain, tmp_path):
  _, path, _ = plain
  with pytest.raises(ConversionError, match="input steps"):
    convert(path, str(tmp_path / "x.tflite"), _calibration(),
            ConvertOptions(input_contract=InputContract("range", 0.0, 0.01)))
  with pytest.raises(ConversionError, match="outside the model's input quantization"):
    convert(path, str(tmp_path / "x.tflite"), _calibration(),
            ConvertOptions(input_contract=InputContract("range", 0.0, 255.0)))


@pytest.mark.parametrize("what", ["not_tflite", "artifact", "float"])
def test_refuses_what_is_not_a_plain_int8_model(plain, measured, tmp_path, what):
  model, _, _ = plain
  path = str(tmp_path / "in.tflite")
  data = {"not_tflite": lambda: b"\0" * 64, "artifact": lambda: measured[0].tflite,
          "float": lambda: convert_keras(model, None)}[what]()
  with open(path, "wb") as f:
    f.write(data)
  message = {"not_tflite": "not a TFLite flatbuffer", "artifact": "already has FORGE_RECALIB",
             "float": "not int8"}[what]
  with pytest.raises(ConversionError, match=message):
    convert(path, str(tmp_path / "out.tflite"), _calibration())


def _layouts_model():
  keras.utils.set_random_seed(3)
  x_in = keras.Input((15, 15, 3))
  x = layers.Conv2D(6, 3, strides=2, padding="valid", name="v_conv")(x_in)
  x = layers.BatchNormalization(name="v_bn")(x)
  x = layers.ReLU(6.0)(x)
  x = layers.DepthwiseConv2D(3, depth_multiplier=2, padding="same", name="m_dw")(x)
  x = layers.BatchNormalization(name="m_bn")(x)
  x = layers.Conv2D(5, (1, 3), strides=(1, 2), padding="same", name="r_conv")(x)
  x = layers.BatchNormalization(name="r_bn")(x)
  out = layers.Dense(4)(layers.GlobalAveragePooling2D()(layers.ReLU()(x)))
  return tiny_models.randomize_bn(keras.Model(x_in, out))


def _layouts_frontend(tmp_path, images: int):
  """The layouts model as full int8, calibrated on `images` images, and those images."""
  x = tiny_models.random_images(images, size=15).astype(np.float32) / 255
  path = str(tmp_path / "layouts.tflite")
  with open(path, "wb") as f:
    f.write(convert_keras(_layouts_model(), x))
  return TfliteFrontend(path), x


def test_accumulators_reproduce_every_layout(tmp_path):
  """VALID and SAME padding, strides, a depthwise multiplier, a non-square kernel: the
  reconstructed pre-activation requantizes to the model's own outputs within a step."""
  frontend, x = _layouts_frontend(tmp_path, 24)
  assert [c.kind for c in frontend.convs] == ["conv", "depthwise", "conv"]
  moments = preact.measure(frontend.data, frontend.convs, frontend.quantize_input(x), 1000)
  assert all(m.worst_steps <= 1 for m in moments)


def test_a_misread_layout_is_refused(tmp_path):
  frontend, x = _layouts_frontend(tmp_path, 8)
  c = frontend.convs[0]
  frontend.convs[0] = dataclasses.replace(c, weights=c.weights[:, ::-1].copy())
  with pytest.raises(ConversionError, match="steps off the model's own output"):
    frontend.measure_targets(frontend.find_sites(), x)


@pytest.mark.parametrize("tensor, index, name", [
    ("resnet20_cifar_1/stem_relu_1/Relu;resnet20_cifar_1/stem_bn_1/batchnorm/add_1;"
     "resnet20_cifar_1/stem_conv_1/convolution", 0, "stem_bn"),
    ("model/activation/Relu;model/batch_normalization/FusedBatchNormV3;"
     "model/conv2d/BiasAdd/ReadVariableOp", 0, "batch_normalization"),
    ("model/conv2d_5/BiasAdd;model/conv2d_5/Conv2D", 6, "conv2d_5"),
    ("StatefulPartitionedCall:0", 7, "op7"),
])
def test_site_names(tensor, index, name):
  assert site_name(tensor, index) == name


def test_manifest_records_measured_targets(measured):
  _, out = measured
  with open(os.path.splitext(out)[0] + ".json") as f:
    assert json.load(f)["targets"] == {"source": "measured", "images": N}
