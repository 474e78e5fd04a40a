"""PyTorch models people actually have convert exactly through ONNX, or are refused.

Each network (forge_tflm/testing/torch_models.py, random weights with BN statistics from
real images) is exported the way the README says and converted; the parity gate's
numbers (converter/parity.py, recorded in the manifest) must show the float model equal
to onnxruntime's and the int8 model agreeing with it. The rows of issue 21's table:

  option-A ResNet-20 with (x/255 - mean)/std inside the model: onnx2tf failed on the
    shortcut's int64 arithmetic ("cannot compute Sub ...") -> converts;
  the same exported with do_constant_folding=True: failed ("Dimensions must be equal,
    but are 16 and 24") -> converts;
  bare, onnx-simplified (one Slice per shortcut, as onnxsim leaves it): converted with
    no warning and was wrong (onnx2tf padded W instead of C of an [N,16,16,16] tensor)
    -> converts exactly (the shortcut becomes a 1x1 conv), and without that rewrite the
    gate refuses it, naming the first site that diverges;
  torchvision-style MobileNetV2 (ReLU6, depthwise, inverted residuals) -> converts.

Issue 35, the idioms of public models: the akamaster ResNet as published
(`out.view(out.size(0), -1)`, `F.avg_pool2d(out, out.size()[3])`, LambdaLayer option-A
shortcuts, nn.Sequential stages), also exported with a dynamic batch: onnx2tf failed
("'ConcatV2' Op have types [int32, int64]") -> converts; option-B shortcuts with
`F.adaptive_avg_pool2d` and `reshape(x.shape[0], -1)`, `reshape(-1, n)`,
`torch.flatten` heads -> convert; the normalization inside the model became int8
MUL, SUB, MUL -> one depthwise conv.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs torch (requirements.txt)")

from forge_tflm.converter import onnx_fold, onnx_rewrite  # noqa: E402
from forge_tflm.converter.options import ConvertOptions  # noqa: E402
from forge_tflm.converter.pipeline import convert  # noqa: E402
from forge_tflm.converter.sites import ConversionError  # noqa: E402
from forge_tflm.data.imageset import ImageSet  # noqa: E402
from forge_tflm.testing import tiny_models, torch_models  # noqa: E402
from tests.conftest import SHARED_DATASETS  # noqa: E402

CIFAR = os.path.join(SHARED_DATASETS, "cifar10")


@pytest.fixture(scope="module")
def images() -> ImageSet:
  """256 CIFAR-10 test images (random smooth images without the dataset)."""
  if os.path.isdir(CIFAR):
    from forge_tflm.data import load_dataset
    return load_dataset("cifar10", "test", CIFAR).random_subset(256, 0)
  x = tiny_models.random_images(256, size=32)
  return ImageSet(x, np.zeros(len(x), np.int64), ("x",), "random")


def _nchw(images: ImageSet, scale: float = 1 / 255) -> np.ndarray:
  return images.images.astype(np.float32).transpose(0, 3, 1, 2) * np.float32(scale)


def _convert(path, out, images, **kw):
  # Random weights: near chance on CIFAR-10's labels, which the clean check would refuse.
  opts = ConvertOptions(calibration_size=128, clean_check="warn", **kw)
  return convert(str(path), str(out), images, opts)


def _assert_exact(result, sites: int, int8_agreement: float = 0.85):
  m = result.manifest
  p = m.parity
  assert len(m.sites) == sites
  assert p["images"] == 32
  assert p["float_vs_source"]["output_max_error"] < 1e-4, p
  assert p["float_vs_source"]["worst_site_error"] < 1e-4, p
  assert p["float_vs_source"]["top1_agreement"] == 1.0, p
  assert p["int8_vs_float"]["top1_agreement"] >= int8_agreement, p
  # Targets measured on the plain int8 model (the default): in source mode the
  # artifact is that model bit for bit, through ONNX too.
  assert m.targets == {"source": "measured", "images": 128}, m.targets
  assert p["source_mode_vs_input"]["max_output_difference"] == 0.0, p
  print(f"\nparity: {p}")  # pytest -s shows the numbers


@pytest.mark.parametrize("constant_folding", [False, True])
def test_resnet20_option_a_with_normalization_inside(tmp_path, images, constant_folding):
  torch.manual_seed(0)
  net = torch_models.calibrate_bn(torch_models.ResNet20A(normalize=True),
                                  _nchw(images, 1.0))
  path = torch_models.export(net, str(tmp_path / "r20a.onnx"),
                             constant_folding=constant_folding)
  from forge_tflm.artifact import InputContract
  result = _convert(path, tmp_path / "r20a.tflite", images,
                    input_contract=InputContract(kind="range", low=0.0, high=255.0))
  _assert_exact(result, 19)
  # The normalization is one depthwise conv (one rounding), not MUL, SUB, MUL.
  assert _ops(result.plain_tflite)[:2] == ["DEPTHWISE_CONV_2D", "CONV_2D"]


def _ops(tflite: bytes) -> list[str]:
  from forge_tflm import tflite_graph as tg
  m = tg.load_model(tflite)
  return [tg.op_name(m, op) for op in m.subgraphs[0].operators]


def _simplified_like_onnxsim(src: str, dst: str) -> str:
  """Folds constants, merges each shortcut's two Slices (H, then W) into one and records
  every tensor's shape (value_info): the form onnxsim leaves (checked with onnxsim
  0.4.36, skip_fuse_bn=True). onnx2tf goes wrong on this form only with the shapes."""
  import onnx
  from onnx import helper, numpy_helper

  m, _ = onnx_fold.fold_constants(onnx.load(src))
  consts = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
  producer = {o: n for n in m.graph.node for o in n.output}
  drop, merged = set(), 0
  for second in list(m.graph.node):
    first = producer.get(second.input[0]) if second.op_type == "Slice" else None
    if first is None or first.op_type != "Slice":
      continue
    params = [np.concatenate([consts[a.input[k]], consts[b.input[k]]])
              for k in range(1, 5) for a, b in [(first, second)]]
    names = [f"{second.name}_merged_{k}" for k in range(4)]
    m.graph.initializer.extend(numpy_helper.from_array(p.astype(np.int64), n)
                               for p, n in zip(params, names))
    second.input[:] = [first.input[0]] + names
    drop.add(id(first))
    merged += 1
  nodes = [n for n in m.graph.node if id(n) not in drop]
  del m.graph.node[:]
  m.graph.node.extend(nodes)
  assert merged == 2
  m = onnx.shape_inference.infer_shapes(m)
  onnx.checker.check_model(m)
  onnx.save(m, dst)
  return dst


@pytest.fixture(scope="module")
def simplified_resnet(tmp_path_factory, images):
  tmp = tmp_path_factory.mktemp("r20a_sim")
  torch.manual_seed(1)
  net = torch_models.calibrate_bn(torch_models.ResNet20A(), _nchw(images))
  raw = torch_models.export(net, str(tmp / "raw.onnx"))
  return _simplified_like_onnxsim(raw, str(tmp / "sim.onnx"))


def test_resnet20_option_a_simplified_converts_exactly(tmp_path, images, simplified_resnet):
  """Its errors (under 1e-4) pass the default gate (1e-3); with --parity_check=warn and
  a tolerance no float32 conversion meets the model is written and the numbers recorded
  (one conversion for both: the gate compares the same numbers)."""
  out = tmp_path / "sim.tflite"
  result = _convert(simplified_resnet, out, images, parity_check="warn",
                    parity_tolerance=1e-15)
  _assert_exact(result, 19)
  assert out.exists() and result.manifest.parity["tolerance"] == 1e-15
  assert result.manifest.parity["float_vs_source"]["worst_site_error"] > 1e-15


def test_parity_gate_refuses_the_silent_shortcut_bug(tmp_path, images, simplified_resnet,
                                                     monkeypatch):
  """Without the shortcut rewrite onnx2tf pads the wrong axis of the [1,16,16,16]
  shortcut: the gate names the first BN after it and writes nothing. With
  --parity_check=warn the model checks still refuse it (onnx2tf's wrong layout leaves a
  TRANSPOSE no device kernel set here runs)."""
  out = tmp_path / "broken.tflite"
  with monkeypatch.context() as mp:
    mp.setattr(onnx_rewrite, "subsample_pad_to_conv", lambda m: (m, 0))
    with pytest.raises(ConversionError, match=r"differs from the onnx model, first at "
                       r"site '/layers/layers\.4/bn1/BatchNormalization'") as e:
      _convert(simplified_resnet, out, images)
    assert len(str(e.value).splitlines()) == 1
    assert not out.exists()
    with pytest.raises(ConversionError, match="TRANSPOSE"):
      _convert(simplified_resnet, out, images, parity_check="warn")
    assert not out.exists()


def test_torchvision_style_mobilenet_v2(tmp_path, images):
  torch.manual_seed(2)
  net = torch_models.calibrate_bn(torch_models.MobileNetV2(), _nchw(images))
  path = torch_models.export(net, str(tmp_path / "mbv2.onnx"))
  result = _convert(path, tmp_path / "mbv2.tflite", images)
  kinds = [s.kind for s in result.manifest.sites]
  assert kinds.count("depthwise") == 7 and len(kinds) == 22  # stem, 2 + 6*3 in blocks, last
  assert {s.options.activation for s in result.manifest.sites} == {"relu6", "none"}
  _assert_exact(result, 22)


# PyTorch idioms as public models write them. Each converts end to end and passes the
# parity gate; one conversion covers several idioms where one model holds them.

@pytest.mark.parametrize("dynamic_batch", [False, True])
def test_akamaster_resnet_as_published(tmp_path, images, dynamic_batch):
  """`out.view(out.size(0), -1)`, `F.avg_pool2d(out, out.size()[3])`, the LambdaLayer
  option-A shortcut and nn.Sequential stages. Before the front end folded to a fixed
  point, onnx2tf failed with "'ConcatV2' Op have types [int32, int64]" at /Concat: the
  shortcut's run-time pads left the batch dimension unknown to shape inference, so the
  flatten's Shape -> Gather -> Unsqueeze -> Concat stayed in the graph."""
  torch.manual_seed(3)
  net = torch_models.calibrate_bn(torch_models.AkamasterResNet(), _nchw(images))
  path = torch_models.export(net, str(tmp_path / "aka.onnx"), dynamic_batch=dynamic_batch)
  _assert_exact(_convert(path, tmp_path / "aka.tflite", images), 7)


def test_option_b_resnet_and_flatten_idioms(tmp_path, images):
  """1x1 conv + BN shortcuts in nn.Sequential containers, `F.adaptive_avg_pool2d`, and
  heads flattened with `reshape(x.shape[0], -1)`, `reshape(-1, n)` and `torch.flatten`."""
  torch.manual_seed(4)
  net = torch_models.calibrate_bn(torch_models.ResNetB(), _nchw(images))
  path = torch_models.export(net, str(tmp_path / "resb.onnx"))
  _assert_exact(_convert(path, tmp_path / "resb.tflite", images), 7)
