"""ONNX front end: sites recovered, mapped by weights, converted by onnx2tf offline."""

import os

import numpy as np
import onnx
import pytest

from forge_tflm import tflite_graph as tg
from forge_tflm.converter import frontend_onnx, match
from forge_tflm.artifact import InputContract
from forge_tflm.converter.options import ConvertOptions
from forge_tflm.converter.pipeline import convert
from forge_tflm.converter.sites import ConversionError
from forge_tflm.data.imageset import ImageSet
from forge_tflm.runtime.segmented import SegmentedModel
from forge_tflm.testing import tiny_models
from tests.converter import onnx_models


@pytest.fixture(scope="module")
def onnx_converted(tmp_path_factory):
  d = tmp_path_factory.mktemp("onnx")
  src = str(d / "tiny.onnx")
  expected = onnx_models.tiny_onnx_resnet(src)
  calib = ImageSet(tiny_models.random_images(48), np.zeros(48, np.int64), ("x",), "gen")
  result = convert(src, str(d / "tiny_forge.tflite"), calib, ConvertOptions())
  return src, expected, result


def test_sites_recovered(onnx_converted):
  src, expected, result = onnx_converted
  sites = frontend_onnx.find_onnx_sites(onnx.load(src))
  assert {s.name: (s.kind, s.activation, s.channels) for s in sites} == expected
  assert {s.name: (s.kind, s.options.activation, s.channels)
          for s in result.manifest.sites} == expected
  assert result.manifest.source["frontend"] == "onnx"


def test_sites_map_to_the_right_convs(onnx_converted):
  src, _, result = onnx_converted
  sites = frontend_onnx.find_onnx_sites(onnx.load(src))
  model = tg.load_model(result.plain_tflite)
  mapping = match.match_sites(model, sites)
  assert len(set(mapping.values())) == len(sites)
  # Order-independent: reversed and shuffled site lists give the same mapping.
  assert match.match_sites(model, sites[::-1]) == mapping
  # The matched conv's output channel count and kind agree with the ONNX conv.
  sg = model.subgraphs[0]
  for site in sites:
    op = sg.operators[mapping[site.name]]
    kernel = sg.tensors[op.inputs[1]]
    assert tg.op_name(model, op) == {"conv": "CONV_2D",
                                     "depthwise": "DEPTHWISE_CONV_2D"}[site.kind]
    assert list(kernel.shape) == list(site.folded_kernel.shape)


def test_int8_model_tracks_the_float_onnx_model(onnx_converted):
  import onnxruntime as ort
  src, _, result = onnx_converted
  images = tiny_models.random_images(64, seed=11)
  x = InputContract().to_float(images)
  sess = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
  ref = np.concatenate([sess.run(None, {"input": x[i:i + 1].transpose(0, 3, 1, 2)})[0]
                        for i in range(len(x))])
  seg = SegmentedModel(result.tflite, "reference")
  got = seg.dequantize_output(seg.run(seg.quantize_input(x), mode="frozen"))
  assert np.mean(ref.argmax(1) == got.argmax(1)) >= 0.85
  assert np.corrcoef(ref.ravel(), got.ravel())[0, 1] > 0.95


def test_onnx2tf_runs_offline(tmp_path):
  import onnx2tf.utils.common_functions as cf
  calib = tiny_models.random_images(4).astype(np.float32) / 255
  with frontend_onnx.offline_onnx2tf(str(tmp_path), calib):
    data = cf.download_test_image_data()  # Reads our local file; no network.
    assert data.shape == (20, 128, 128, 3)
    os.remove(frontend_onnx.ONNX2TF_SAMPLE_FILE)
    with pytest.raises(ConversionError, match="offline"):
      cf.download_test_image_data()
  assert cf.requests.get.__name__ == "get"  # Restored afterwards.


def _edit(src, dst, fn):
  model = onnx.load(src)
  fn(model)
  onnx.save(model, dst)
  return dst


def test_folded_bn_has_no_sites(tmp_path):
  src = str(tmp_path / "m.onnx")
  onnx_models.tiny_onnx_resnet(src)

  def drop_bns(model):
    g = model.graph
    keep = []
    for n in g.node:
      if n.op_type == "BatchNormalization":
        for other in g.node:
          for i, name in enumerate(other.input):
            if name == n.output[0]:
              other.input[i] = n.input[0]
        for o in g.output:
          if o.name == n.output[0]:
            o.name = n.input[0]
      else:
        keep.append(n)
    del g.node[:]
    g.node.extend(keep)

  dst = _edit(src, str(tmp_path / "folded.onnx"), drop_bns)
  with pytest.raises(ConversionError, match="no BatchNormalization nodes.*never had BN, or"
                     " BN folded.*do_constant_folding=False"):
    frontend_onnx.find_onnx_sites(onnx.load(dst))


def test_bn_not_after_a_conv_is_named_as_such(tmp_path):
  """Before: "BN was folded into the convs at export" for a model whose BNs never
  followed a conv (here: every BN reads the model's input)."""
  src = str(tmp_path / "m.onnx")
  onnx_models.tiny_onnx_resnet(src)

  def bns_read_the_input(model):
    for n in model.graph.node:
      if n.op_type == "BatchNormalization":
        n.input[0] = model.graph.input[0].name

  dst = _edit(src, str(tmp_path / "input_bn.onnx"), bns_read_the_input)
  with pytest.raises(ConversionError, match="none of its BatchNormalization nodes follows a"
                     " Conv"):
    frontend_onnx.find_onnx_sites(onnx.load(dst))


def test_training_mode_bn_is_rejected(tmp_path):
  src = str(tmp_path / "m.onnx")
  onnx_models.tiny_onnx_resnet(src)
  model = onnx.load(src)
  bn = next(n for n in model.graph.node if n.op_type == "BatchNormalization")
  bn.attribute.append(onnx.helper.make_attribute("training_mode", 1))
  with pytest.raises(ConversionError, match="training mode"):
    frontend_onnx.find_onnx_sites(model)


def test_unreadable_and_missing(tmp_path):
  bad = tmp_path / "bad.onnx"
  bad.write_bytes(b"garbage")
  with pytest.raises(ConversionError, match="cannot read ONNX model"):
    frontend_onnx.load_onnx_model(str(bad))
  with pytest.raises(ConversionError, match="does not exist"):
    frontend_onnx.load_onnx_model(str(tmp_path / "none.onnx"))


def test_non_float_model_is_rejected(tmp_path):
  src = str(tmp_path / "m.onnx")
  onnx_models.tiny_onnx_resnet(src)
  model = onnx.load(src)
  w = next(i for i in model.graph.initializer if i.name == "stem_w")
  from onnx import numpy_helper
  w.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(w).astype(np.float16), "stem_w"))
  onnx.save(model, str(tmp_path / "half.onnx"))
  with pytest.raises(ConversionError, match="not a float32 model"):
    frontend_onnx.load_onnx_model(str(tmp_path / "half.onnx"))


def test_pytorch_export_recipe_keeps_bn_and_converts(tmp_path):
  """The README's export recipe, end to end (needs the local torch 2.13.0 wheel)."""
  torch = pytest.importorskip("torch", reason="needs torch (pip install torch==2.13.0)")
  nn = torch.nn

  class Net(nn.Module):
    def __init__(self):
      super().__init__()
      self.c1, self.b1 = nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
      self.c2 = nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False)
      self.b2 = nn.BatchNorm2d(8)
      self.fc = nn.Linear(8, 10)

    def forward(self, x):
      x = torch.relu(self.b1(self.c1(x)))
      x = nn.functional.relu6(self.b2(self.c2(x)))
      return self.fc(x.mean((2, 3)))

  torch.manual_seed(0)
  net = Net()
  for bn in (net.b1, net.b2):  # Non-trivial statistics, as after training.
    bn.running_mean.uniform_(-0.5, 0.5)
    bn.running_var.uniform_(0.5, 2.0)
    bn.weight.data.uniform_(0.5, 1.5)
    bn.bias.data.uniform_(-0.3, 0.3)
  path = str(tmp_path / "net.onnx")
  torch.onnx.export(net.eval(), torch.randn(1, 3, 16, 16), path, dynamo=False,
                    do_constant_folding=False, training=torch.onnx.TrainingMode.PRESERVE)
  sites = frontend_onnx.find_onnx_sites(onnx.load(path))
  assert [(s.kind, s.activation, s.channels) for s in sites] == [
      ("conv", "relu", 8), ("depthwise", "relu6", 8)]
  np.testing.assert_allclose(sites[0].beta, net.b1.bias.detach().numpy(), rtol=1e-6)
  calib = ImageSet(tiny_models.random_images(32), np.zeros(32, np.int64), ("x",), "gen")
  result = convert(path, str(tmp_path / "net_forge.tflite"), calib, ConvertOptions())
  assert len(result.manifest.sites) == 2
