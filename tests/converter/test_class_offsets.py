"""`convert --class_images`: class offsets measured on the int8 model, written as each
FORGE op's fourth input with option classes = K; the manifest states the bytes."""

import numpy as np
import pytest

from forge_tflm import tflite_graph as tg
from forge_tflm.artifact import Artifact
from forge_tflm.converter import class_offsets
from forge_tflm.converter.options import ConvertOptions
from forge_tflm.converter.pipeline import convert
from forge_tflm.converter.sites import ConversionError
from forge_tflm.data.imageset import ImageSet
from forge_tflm.ops import RecalibOptions
from forge_tflm.runtime.segmented import ADAPT, SOURCE, SegmentedModel
from tests.converter import tiny_models


def _labelled(n=120, seed=0, classes=10):
  images = tiny_models.random_images(n, seed=seed)
  # Class-dependent brightness, so the class means differ measurably.
  labels = np.arange(n) % classes
  images = np.clip(images.astype(np.int32) + 8 * labels[:, None, None, None] - 40,
                   0, 255).astype(np.uint8)
  return ImageSet(images, labels.astype(np.int64), tuple(map(str, range(classes))),
                  "generated")


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
  d = tmp_path_factory.mktemp("classes")
  src = str(d / "tiny.keras")
  tiny_models.tiny_resnet().save(src)
  plain = str(d / "plain.tflite")
  out = str(d / "classes.tflite")
  convert(src, plain, _labelled(), ConvertOptions(calibration_size=32))
  # class_margin 0: every prediction of the tiny model commits (a test below).
  result = convert(src, out, _labelled(), ConvertOptions(calibration_size=32,
                                                         class_images=100,
                                                         class_margin=0.0))
  return plain, out, result


def test_every_site_gets_offsets_that_average_to_zero(converted):
  plain, out, result = converted
  model = tg.load_model(result.tflite)
  art = Artifact.load(out, require_manifest=True)
  for site in art.manifest.sites:
    assert site.options.classes == 10
    op = model.subgraphs[0].operators[site.op_index]
    assert len(op.inputs) == 4
    offsets = tg.buffer_array(model, model.subgraphs[0].tensors[op.inputs[3]])
    assert offsets.shape == (10, site.channels)
    np.testing.assert_allclose(offsets.mean(0), 0, atol=1e-5 * (1 + np.abs(offsets).max()))
    assert np.abs(offsets).max() > 0  # The classes differ by construction.


def test_offsets_are_the_class_means_of_the_op_input(converted):
  plain, out, result = converted
  images = _labelled()
  model = SegmentedModel(result.tflite)
  x = model.quantize_input(ConvertOptions().input_contract.to_float(images.images[:100]))
  measured = class_offsets.measure(result.tflite, x, images.labels[:100])
  got = {}

  def capture(node, xb, mode):
    q = node.quant
    got[node.op_index] = ((xb.astype(np.float64) - q.z_x) * q.s_x).mean(axis=(1, 2))
    return node.op(xb, mode=SOURCE)

  model.forge_kernel = capture
  model.run(x, SOURCE)
  for op_index, per_image in got.items():
    means = np.stack([per_image[images.labels[:100] == k].mean(0) for k in range(10)])
    np.testing.assert_allclose(measured[op_index], means - means.mean(0), rtol=1e-4,
                               atol=1e-6)


def test_the_class_margin_is_in_output_steps_and_in_the_manifest(tmp_path):
  assert class_offsets.margin_steps(0.0, 0.1) == 0
  assert class_offsets.margin_steps(12.0, 0.1187) == 102  # ceil(101.09)
  assert class_offsets.margin_steps(1.0, 0.1) == 10
  assert class_offsets.margin_steps(1e6, 0.1) == 255
  with pytest.raises(ValueError, match="class_margin"):
    ConvertOptions(class_margin=-1.0)
  src = str(tmp_path / "tiny.keras")
  tiny_models.tiny_resnet().save(src)
  out = str(tmp_path / "margin.tflite")
  convert(src, out, _labelled(), ConvertOptions(calibration_size=32, class_images=100,
                                                class_margin=2.0))
  art = Artifact.load(out, require_manifest=True)
  scale = art.manifest.to_json()["output"]["quantization"]["scale"]
  for site in art.manifest.sites:
    assert site.options.class_margin == class_offsets.margin_steps(2.0, scale)
  assert SegmentedModel.from_artifact(art).nodes[0].op.options.class_margin == \
      art.manifest.sites[0].options.class_margin


def test_manifest_states_the_bytes_per_channel(converted):
  _, out, result = converted
  m = result.manifest
  for s in m.to_json()["sites"]:
    mem = s["memory"]
    # [mu, var] (label-blind), 10 classes, one pending image.
    assert mem["state_bytes_per_channel"] == 8 + 8 * 10 + 8
    assert mem["state_bytes"] == 96 * s["channels"]
    assert mem["class_offsets_bytes_flash"] == 4 * 10 * s["channels"]
    assert s["target_bytes"] == 8 * s["channels"] + 4 * 10 * s["channels"]
  assert m.state_bytes == 96 * m.channels


def test_source_mode_is_the_plain_model_and_adapt_commits(converted):
  plain, out, result = converted
  with open(plain, "rb") as f:
    plain_model = SegmentedModel(f.read())
  model = SegmentedModel(result.tflite)
  assert model.class_balanced and not plain_model.class_balanced
  x = model.quantize_input(ConvertOptions().input_contract.to_float(
      _labelled(8, seed=3).images))
  np.testing.assert_array_equal(model.run(x, SOURCE), plain_model.run(x, SOURCE))
  before = [n.state.classes.copy() for n in model.nodes]
  model.run(x, ADAPT)  # Commits its own predictions: some class state moves.
  assert all(n.state.pending is None for n in model.nodes)
  assert any(not np.array_equal(b, n.state.classes) for b, n in zip(before, model.nodes))
  model.reset()
  assert all(np.array_equal(b, n.state.classes) for b, n in zip(before, model.nodes))


def test_unlabelled_or_incomplete_class_images_are_refused(tmp_path):
  src = str(tmp_path / "tiny.keras")
  tiny_models.tiny_resnet().save(src)
  images = _labelled(40)
  with pytest.raises(ConversionError, match="labelled calibration images"):
    convert(src, str(tmp_path / "a.tflite"), images.images,
            ConvertOptions(calibration_size=16, class_images=20))
  one_class = ImageSet(images.images, np.zeros(40, np.int64), images.class_names,
                       "generated")
  with pytest.raises(ConversionError, match="no image of class"):
    convert(src, str(tmp_path / "b.tflite"), one_class,
            ConvertOptions(calibration_size=16, class_images=20))
  assert not (tmp_path / "b.tflite").exists()


def test_options_refuse_classes_given_by_hand():
  with pytest.raises(ValueError, match="set by the converter"):
    ConvertOptions(class_images=10, recalib=RecalibOptions(window=640, classes=10))
  with pytest.raises(ValueError, match="class_images must be >= 0"):
    ConvertOptions(class_images=-1)
