"""`convert` from a full-int8 .tflite: targets measured, sites = every conv."""

import json
import os

import keras
import numpy as np
import pytest
from keras import layers

from forge_tflm import model_check
from forge_tflm import tflite_graph as tg
from forge_tflm.artifact import Artifact, InputContract
from forge_tflm.converter.calibration import record_bn_outputs
from forge_tflm.converter.frontend_keras import find_keras_sites
from forge_tflm.converter.frontend_tflite import TfliteFrontend, site_name
from forge_tflm.converter.options import ConvertOptions
from forge_tflm.converter.pipeline import convert
from forge_tflm.converter.quantize import convert_keras
from forge_tflm.converter.sites import ConversionError
from forge_tflm.data.imageset import ImageSet
from forge_tflm.runtime.segmented import SOURCE, SegmentedModel
from forge_tflm.testing import tiny_models

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


def test_measured_targets_are_the_moments_of_what_the_op_reads(plain, measured):
  """beta, |gamma| = the mean and std of each conv's output after its activation on the
  calibration images: the float model's activation(BN output), up to int8 rounding."""
  model, _, _ = plain
  result, out = measured
  x = _calibration().images.astype(np.float32) / 255.0
  _, sink = record_bn_outputs(model, find_keras_sites(model), x)
  act = {"relu": lambda v: np.maximum(v, 0), "relu6": lambda v: np.clip(v, 0, 6),
         "none": lambda v: v}
  mt = tg.load_model(result.tflite)
  for s in result.manifest.sites:
    node = model_check.forge_node(mt, s.op_index, out)
    y = act[s.options.activation](np.concatenate(sink[s.name]).reshape(-1, s.channels))
    step = s.input_quant.scale  # int8 rounding moves a mean by at most half a step.
    np.testing.assert_allclose(node.beta, y.mean(0), atol=step)
    np.testing.assert_allclose(node.gamma_abs, y.std(0), rtol=0.05, atol=step)


def _same_outputs(plain_path: str, artifact: bytes, images: np.ndarray) -> None:
  x = SegmentedModel(open(plain_path, "rb").read())
  f = SegmentedModel(artifact)
  q = x.quantize_input(images)
  np.testing.assert_array_equal(f.run(q, mode=SOURCE), x.run(q, mode=SOURCE))


def test_source_mode_is_the_input_model_bit_for_bit(plain, measured):
  """The op reads the conv's own output, so FORGE off is the model the user ships (the
  widened pre-activation grid this replaced moved 0.8-5.8% of top-1 predictions)."""
  _, path, _ = plain
  result, _ = measured
  p = result.manifest.parity["source_mode_vs_input"]
  assert p["top1_agreement"] == 1.0 and p["max_output_difference"] == 0.0
  _same_outputs(path, result.tflite, tiny_models.random_images(16, seed=5) / np.float32(255))


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
             "float": "is FLOAT32.*full-int8 .tflite"}[what]
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


def test_every_layout_is_the_input_model_bit_for_bit(tmp_path):
  """VALID and SAME padding, strides, a depthwise multiplier, a non-square kernel,
  relu6, relu and no activation: source mode reproduces the model exactly."""
  frontend, x = _layouts_frontend(tmp_path, 24)
  assert [c.kind for c in frontend.convs] == ["conv", "depthwise", "conv"]
  assert [c.activation for c in frontend.convs] == ["relu6", "none", "relu"]
  result = convert(frontend.path, str(tmp_path / "out.tflite"), (x * 255).astype(np.uint8))
  assert len(result.manifest.sites) == 3
  _same_outputs(frontend.path, result.tflite,
                tiny_models.random_images(16, size=15, seed=9) / np.float32(255))


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


def _op(model, name):
  sg = model.subgraphs[0]
  return next(op for op in sg.operators if tg.op_name(model, op) == name)


def _mutate_add_input(m): _op(m, "ADD").inputs[0] = -1
def _mutate_graph_output(m): m.subgraphs[0].outputs[0] = -1
def _mutate_add_scale(m): m.subgraphs[0].tensors[_op(m, "ADD").outputs[0]].quantization.scale[0] = 0.0
def _mutate_conv_options(m): _op(m, "CONV_2D").builtinOptions = None
def _mutate_opcode_index(m): _op(m, "CONV_2D").opcodeIndex = len(m.operatorCodes) + 3
def _mutate_conv_output(m): _op(m, "CONV_2D").outputs[0] = len(m.subgraphs[0].tensors) + 7
def _mutate_scalar_output(m): m.subgraphs[0].tensors[_op(m, "CONV_2D").outputs[0]].shape = []
def _mutate_conv_input(m): _op(m, "CONV_2D").inputs[0] = -2
def _mutate_output_zero_point(m):
  sg = m.subgraphs[0]
  sg.tensors[sg.outputs[0]].quantization.zeroPoint[0] = 128
def _mutate_batch(value):
  def mutate(m):
    sg = m.subgraphs[0]
    sg.tensors[sg.inputs[0]].shape[0] = value
  return mutate
def _mutate_no_subgraphs(m): m.subgraphs = []
def _mutate_bias_buffer(m):
  sg = m.subgraphs[0]
  sg.tensors[_op(m, "CONV_2D").inputs[2]].buffer = len(m.buffers) + 5
def _mutate_version(m): m.version = 2
def _mutate_conv_output_scale(m):  # eps = (scale / 16)^2 > 1: ForgeOptions refused it.
  m.subgraphs[0].tensors[_op(m, "CONV_2D").outputs[0]].quantization.scale[0] = 255.0
def _mutate_empty_activation_buffer(m):  # LiteRT read it as a 0-byte constant.
  b = tg.schema.BufferT()
  b.data = np.zeros(0, np.uint8)
  m.buffers.append(b)
  m.subgraphs[0].tensors[_op(m, "CONV_2D").outputs[0]].buffer = len(m.buffers) - 1


# Issue 53: each crashed convert (SIGSEGV, SIGABRT) or ended in a traceback or a
# multi-line error before the int8 input ran the evaluator's model checks.
DOOR_MUTANTS = {
    "add_input_-1": _mutate_add_input, "graph_output_-1": _mutate_graph_output,
    "add_output_scale_0": _mutate_add_scale, "conv_without_options": _mutate_conv_options,
    "opcode_index_out_of_range": _mutate_opcode_index,
    "conv_output_out_of_range": _mutate_conv_output, "scalar_conv_output": _mutate_scalar_output,
    "conv_input_-2": _mutate_conv_input, "output_zero_point_128": _mutate_output_zero_point,
    "batch_0": _mutate_batch(0), "batch_-1": _mutate_batch(-1),
    "no_subgraphs": _mutate_no_subgraphs, "bias_buffer_out_of_range": _mutate_bias_buffer,
    "schema_version_2": _mutate_version,
    # Found by forge_tflm/testing/convert_fuzz.py: a two-line LiteRT error and a ValueError
    # about FORGE's eps that did not say which op.
    "conv_output_scale_255": _mutate_conv_output_scale,
    "empty_activation_buffer": _mutate_empty_activation_buffer,
}


@pytest.mark.parametrize("name", sorted(DOOR_MUTANTS))
def test_a_malformed_int8_model_is_refused_in_one_line(plain, tmp_path, name):
  _, path, _ = plain
  with open(path, "rb") as f:
    model = tg.load_model(f.read())
  if name == "bias_buffer_out_of_range" and len(_op(model, "CONV_2D").inputs) < 3:
    _op(model, "CONV_2D").inputs.append(0)  # Bias-free conv: give it one to break.
  DOOR_MUTANTS[name](model)
  mutant = str(tmp_path / "mutant.tflite")
  with open(mutant, "wb") as f:
    f.write(tg.save_model(model))
  with pytest.raises(ConversionError) as e:
    convert(mutant, str(tmp_path / "out.tflite"), _calibration())
  assert "\n" not in str(e.value) and mutant in str(e.value)
  assert os.listdir(tmp_path) == ["mutant.tflite"]  # Nothing written.
