"""`convert` end to end on a tiny model with real BN statistics."""

import json
import os

import numpy as np
import pytest

from forge_tflm import tflite_graph as tg
from forge_tflm.artifact import Artifact, InputContract, Manifest
from forge_tflm.converter import match
from forge_tflm.converter.frontend_keras import find_keras_sites
from forge_tflm.converter.options import ConvertOptions
from forge_tflm.converter.pipeline import convert
from forge_tflm.converter.sites import ConversionError
from forge_tflm.data.imageset import ImageSet
from forge_tflm.ops import RecalibOptions, decode_options
from forge_tflm.runtime.segmented import SegmentedModel
from forge_tflm.testing import tiny_models


def _calibration(n=64, seed=0):
  return ImageSet(tiny_models.random_images(n, seed=seed), np.zeros(n, np.int64),
                  ("x",), "generated")


@pytest.fixture(scope="module", params=["measured", "recorded"])
def converted(tmp_path_factory, request):
  """The tiny model converted with each source of targets (measured: the default)."""
  d = tmp_path_factory.mktemp("conv")
  model = tiny_models.tiny_resnet()
  src = str(d / "tiny.keras")
  model.save(src)
  out = str(d / "tiny_forge.tflite")
  options = ConvertOptions(c_array=True, recalib=RecalibOptions(window=640),
                           targets=request.param)
  result = convert(src, out, _calibration(), options,
                   command="forge_tflm convert --model=tiny.keras",
                   plain_output=str(d / "tiny_plain.tflite"))
  return src, out, result


def test_manifest_counts_and_state_bytes(converted):
  _, out, result = converted
  m = result.manifest
  with open(os.path.splitext(out)[0] + ".json") as f:
    written = json.load(f)
  assert written == m.to_json()
  assert Manifest.from_json(written) == m  # The typed manifest round-trips.
  assert written["totals"]["sites"] == len(m.sites) == 5
  channels = sum(c for _, _, c in tiny_models.TINY_SITES.values())
  assert written["totals"]["channels"] == m.channels == channels
  assert written["totals"]["state_bytes_sram"] == m.state_bytes == 8 * channels
  assert written["totals"]["target_bytes_flash"] == m.target_bytes == 8 * channels
  memory = written["totals"]["memory"]
  assert memory["state_bytes_sram"] == 8 * channels
  assert memory["arena_added_bytes_32bit"] == sum(
      s["memory"]["arena_bytes_32bit"] for s in written["sites"]) > 8 * channels
  assert memory["scratch_bytes_peak"] == max(s["memory"]["scratch_bytes"]
                                             for s in written["sites"])
  assert {s.name: (s.kind, s.options.activation, s.channels) for s in m.sites} == \
      tiny_models.TINY_SITES
  artifact = Artifact.load(out, require_manifest=True)
  assert artifact.manifest == m and m.model_sha256 == artifact.sha256
  # Each site names its FORGE operator explicitly, and that op writes its tensor.
  model = tg.load_model(artifact.model)
  sg = model.subgraphs[0]
  for s in m.sites:
    op = sg.operators[s.op_index]
    assert tg.op_name(model, op) == tg.FORGE_RECALIB
    assert tg.tensor_name(sg.tensors[op.outputs[0]]) == s.output_tensor
    assert tg.tensor_name(sg.tensors[op.inputs[0]]) == s.input_tensor
  assert [n.name for n in SegmentedModel.from_artifact(artifact).nodes] == \
      [s.name for s in m.sites]
  assert m.input_quant.zero_point == -128
  assert m.input_quant.scale == pytest.approx(1 / 255, rel=1e-3)
  assert m.input_contract == InputContract()


def test_graph_edit_changes_only_the_sites(converted):
  _, _, result = converted
  plain, forge = tg.load_model(result.plain_tflite), tg.load_model(result.tflite)
  psg, fsg = plain.subgraphs[0], forge.subgraphs[0]
  ops = [tg.op_name(forge, op) for op in fsg.operators]
  assert ops.count(tg.FORGE_RECALIB) == 5
  assert len(fsg.operators) == len(psg.operators) + 5
  measured = result.manifest.targets["source"] == "measured"
  # Each FORGE op follows its conv and writes the tensor the conv used to write; with
  # recorded targets the conv's activation moves into FORGE, measured ones keep it.
  plain_ops = iter(op for op in psg.operators)
  for i, op in enumerate(fsg.operators):
    if tg.op_name(forge, op) == tg.FORGE_RECALIB:
      conv = fsg.operators[i - 1]
      assert tg.op_name(forge, conv) in ("CONV_2D", "DEPTHWISE_CONV_2D")
      assert conv.outputs[0] == op.inputs[0]
      before = next(p for p in plain_ops if p.outputs[0] == op.outputs[0])
      assert conv.builtinOptions.fusedActivationFunction == (
          before.builtinOptions.fusedActivationFunction if measured else 0)
      opts = decode_options(bytes(np.asarray(op.customOptions, np.uint8)))
      assert opts.window == 640 and opts.variance == "running"
  # Every original tensor keeps its name and quantization.
  for t in range(len(psg.tensors)):
    a, b = psg.tensors[t], fsg.tensors[t]
    assert tg.tensor_name(a) == tg.tensor_name(b)
    if a.quantization is not None and a.quantization.scale is not None:
      np.testing.assert_array_equal(a.quantization.scale, b.quantization.scale)
  # Sites with no activation (every site, with measured targets) keep the conv's
  # output quantization for T_pre.
  for s in result.manifest.sites:
    if s.options.activation == "none" or measured:
      assert s.input_quant == s.output_quant
    else:
      assert s.input_quant.zero_point > -128  # Negative values representable.


def test_measured_targets_keep_source_mode_the_plain_model_bit_for_bit(converted):
  _, _, result = converted
  if result.manifest.targets["source"] != "measured":
    pytest.skip("recorded targets widen each activated site's grid")
  assert result.manifest.targets == {"source": "measured", "images": 64}
  assert result.manifest.parity["source_mode_vs_input"]["max_output_difference"] == 0.0
  x = tiny_models.random_images(50, seed=11)
  plain = SegmentedModel(result.plain_tflite, "reference")
  forge = SegmentedModel(result.tflite, "reference")
  xq = plain.quantize_input(InputContract().to_float(x))
  np.testing.assert_array_equal(plain.run(xq), forge.run(xq, mode="source"))


def test_frozen_forge_agrees_with_plain_int8(converted):
  _, _, result = converted
  x = tiny_models.random_images(200, seed=7)
  plain = SegmentedModel(result.plain_tflite, "reference")
  forge = SegmentedModel(result.tflite, "reference")
  xq = plain.quantize_input(InputContract().to_float(x))
  a, b = plain.run(xq), forge.run(xq, mode="frozen")
  agreement = float(np.mean(a.argmax(1) == b.argmax(1)))
  assert agreement >= 0.9, agreement
  assert np.mean(np.abs(plain.dequantize_output(a) - forge.dequantize_output(b))) < 0.1


def test_weight_matching_ignores_order_and_rejects_foreign_weights(converted):
  src, _, result = converted
  import keras
  sites = find_keras_sites(keras.saving.load_model(src))
  model = tg.load_model(result.plain_tflite)
  forward = match.match_sites(model, sites)
  assert match.match_sites(model, sites[::-1]) == forward
  assert len(set(forward.values())) == len(sites)
  import dataclasses
  bad = dataclasses.replace(sites[0], folded_kernel=sites[0].folded_kernel * 1.5)
  with pytest.raises(ConversionError, match="no conv op .* has its folded weights"):
    match.match_sites(model, [bad])


def test_c_array(converted):
  _, out, result = converted
  stem = os.path.splitext(out)[0]
  header = open(stem + "_model_data.h").read()
  source = open(stem + "_model_data.cc").read()
  assert "forge_tflm convert --model=tiny.keras" in header
  assert "alignas(16) const unsigned char g_tiny_forge_model[]" in source
  assert f"g_tiny_forge_model_len = {len(result.tflite)};" in source
  body = source.split("{", 1)[1].split("}", 1)[0]
  assert bytes(int(v, 16) for v in body.replace(",", " ").split()) == result.tflite


def test_site_selection(tmp_path, converted):
  src, _, _ = converted
  r = convert(src, str(tmp_path / "two.tflite"), _calibration(16),
              ConvertOptions(sites=("b2_bn", "dw_bn"), recalib=RecalibOptions(momentum=0.1)))
  assert [s.name for s in r.manifest.sites] == ["b2_bn", "dw_bn"]
  assert r.manifest.sites[0].options.momentum == pytest.approx(0.1)
  assert len(r.manifest.bn_sites_found) == 5
  r = convert(src, str(tmp_path / "none.tflite"), _calibration(16),
              ConvertOptions(sites="none"))
  assert not r.manifest.sites and r.tflite == r.plain_tflite


def _no_outputs(tmp_path, stem):
  return not [p for p in os.listdir(tmp_path) if p.startswith((stem, ".forge_tmp"))]


def test_errors_leave_no_output(tmp_path, converted):
  src, _, _ = converted
  out = str(tmp_path / "o.tflite")
  with pytest.raises(ConversionError, match="unknown site\\(s\\) nope"):
    convert(src, out, _calibration(8), ConvertOptions(sites=("nope",)))
  assert _no_outputs(tmp_path, "o")
  with pytest.raises(ConversionError, match="does not exist"):
    convert(str(tmp_path / "missing.keras"), out, _calibration(8))
  with pytest.raises(ConversionError, match="no calibration images"):
    convert(src, out, ImageSet(np.zeros((0, 16, 16, 3), np.uint8), np.zeros(0, np.int64),
                               ("x",), "empty"))
  with pytest.raises(ConversionError, match="calibration images are"):
    convert(src, out, ImageSet(tiny_models.random_images(4, size=8), np.zeros(4, np.int64),
                               ("x",), "small"))
  with pytest.raises(ConversionError, match="already has FORGE_RECALIB"):
    convert(str(tmp_path / ".." / os.path.basename(os.path.dirname(src)) /
                "tiny_forge.tflite"), out, _calibration(8))
  assert _no_outputs(tmp_path, "o")


def test_a_float_model_and_its_plain_int8_model_convert_alike(tmp_path, converted):
  """One conversion path: with measured targets a float model's artifact is what its
  plain int8 model gives through the int8 door (same sites in the same order, targets,
  options, and outputs in every mode)."""
  _, _, result = converted
  if result.manifest.targets["source"] != "measured":
    pytest.skip("recorded targets come from the float model's BN statistics")
  plain = tmp_path / "plain.tflite"
  plain.write_bytes(result.plain_tflite)
  again = convert(str(plain), str(tmp_path / "again.tflite"), _calibration(),
                  ConvertOptions(recalib=RecalibOptions(window=640)))
  a, b = result.manifest.sites, again.manifest.sites
  assert [(s.kind, s.op_index, s.options, s.input_quant, s.output_quant) for s in a] == \
      [(s.kind, s.op_index, s.options, s.input_quant, s.output_quant) for s in b]
  x = tiny_models.random_images(20, seed=3)
  one, two = SegmentedModel(result.tflite, "reference"), SegmentedModel(again.tflite,
                                                                         "reference")
  xq = one.quantize_input(InputContract().to_float(x))
  for mode in ("source", "frozen", "adapt"):
    np.testing.assert_array_equal(one.run(xq, mode=mode), two.run(xq, mode=mode))


def test_never_overwrites_the_input(tmp_path, converted):
  src, _, _ = converted
  with pytest.raises(ConversionError, match="must end in .tflite"):
    convert(src, src, _calibration(8))
  fake = tmp_path / "m.tflite"
  fake.write_bytes(b"x")
  with pytest.raises(ConversionError, match="would overwrite the input"):
    convert(str(fake), str(fake), _calibration(8))
  assert fake.read_bytes() == b"x"


def test_bundled_resnet20_converts_with_all_sites(tmp_path):
  from tests.conftest import REPO_ROOT
  src = os.path.join(REPO_ROOT, "models", "resnet20_cifar10.keras")
  if not os.path.exists(src):
    pytest.skip(f"bundled model {src} not present")
  calib = ImageSet(tiny_models.random_images(32, size=32, seed=0), np.zeros(32, np.int64),
                   ("x",), "generated")
  out = str(tmp_path / "r20.tflite")
  convert(src, out, calib, ConvertOptions())
  with open(os.path.splitext(out)[0] + ".json") as f:
    manifest = json.load(f)
  assert len(manifest["sites"]) == 21
  assert sum(s["channels"] for s in manifest["sites"]) == 784
  # 2 x 784 float32 each: running statistics in SRAM, BN targets in flash.
  assert manifest["totals"]["state_bytes_sram"] == 6272
  assert manifest["totals"]["target_bytes_flash"] == 6272
  with open(out, "rb") as f:
    assert len(SegmentedModel(f.read()).nodes) == 21
  # The default: targets measured on the plain int8 model, which source mode is.
  assert manifest["targets"] == {"source": "measured", "images": 32}
  assert manifest["parity"]["source_mode_vs_input"]["max_output_difference"] == 0.0
  assert manifest["sites"][0]["name"] == "stem_bn"  # The BN layers' names.


@pytest.mark.parametrize("targets,checked", [
    ("recorded", "the converted FORGE model"),
    ("measured", "the converted plain int8 model")])
def test_a_model_the_evaluator_would_refuse_fails_at_convert(tmp_path, monkeypatch, targets,
                                                              checked):
  """convert checks what it makes with forge_tflm.model_check (what Artifact.load and
  the firmware export run): measured targets check the plain int8 model before an
  interpreter measures on it (the int8 door), and the output is checked at the end;
  an unsupported or malformed result fails here, not later."""
  from forge_tflm import model_check

  calls = []

  def refuse(data, source="model", host_ops=()):
    calls.append(source)
    raise model_check.ModelCheckError(f"{source}: operator 3 (TRANSPOSE) is not supported")

  monkeypatch.setattr(model_check, "check_model", refuse)
  keras_path = str(tmp_path / "tiny.keras")
  tiny_models.tiny_resnet().save(keras_path)
  out = tmp_path / "o.tflite"
  with pytest.raises(ConversionError, match=f"{checked}: operator 3 "
                     r"\(TRANSPOSE\) is not supported \(the evaluator and devices"):
    convert(keras_path, str(out), tiny_models.random_images(16),
            ConvertOptions(targets=targets))
  assert calls == [checked] and not out.exists()


def test_artifact_load_names_a_malformed_manifest(converted, tmp_path):
  """Issue 20: Artifact.load said only "malformed manifest: KeyError: 'channels'"."""
  import shutil
  from forge_tflm.artifact import ArtifactError

  _, out, _ = converted
  model = tmp_path / "m.tflite"
  shutil.copy(out, model)
  doc = json.loads(open(os.path.splitext(out)[0] + ".json").read())
  del doc["sites"][0]["channels"]
  (tmp_path / "m.json").write_text(json.dumps(doc))
  with pytest.raises(ArtifactError, match=f"^{tmp_path / 'm.json'}: malformed manifest.*"
                     "channels"):
    Artifact.load(str(model))
