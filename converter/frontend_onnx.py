"""ONNX front end: Conv->BatchNormalization(->Relu/Clip 0..6) sites, and onnx2tf, offline.

The ONNX graph must still contain BatchNormalization nodes. From PyTorch, export
the eval-mode model without constant folding, which is what fuses BN into Conv:

    torch.onnx.export(model.eval(), example, "model.onnx", dynamo=False,
                      do_constant_folding=False,
                      training=torch.onnx.TrainingMode.PRESERVE)

(PRESERVE keeps an eval-mode model out of the exporter's eval peephole pass,
which is where Conv+BN get fused; tests/converter/test_frontend_onnx.py runs
this recipe end to end.) The graph is then rewritten: a symbolic batch pinned to 1 and
every computation the fixed input shape determines folded (onnx_fold.py), option-A
subsample+pad shortcuts turned into 1x1 convolutions and a per-channel input
normalization into one depthwise convolution (onnx_rewrite.py).

onnx2tf turns the graph into a TensorFlow SavedModel (NHWC), which is then
quantized like the Keras path. onnx2tf fetches sample images from the internet
when a model has image inputs unless a file of that name exists in its working
directory, so it runs in a private directory holding that file, made from the
user's calibration images, and with its HTTP client disabled.
"""

from __future__ import annotations

import contextlib
import os
import tempfile

import numpy as np

from absl import logging

from forge_tflm.converter import onnx_fold, onnx_rewrite
from forge_tflm.converter.onnx_fold import node_attr
from forge_tflm.converter.sites import BNSite, ConversionError, first_line, fold_scale

# The file onnx2tf looks for before downloading (onnx2tf.utils.common_functions).
ONNX2TF_SAMPLE_FILE = "calibration_image_sample_data_20x128x128x3_float32.npy"
_PASS_THROUGH = {"Dropout", "Identity", "Relu", "Clip", "LeakyRelu", "Sigmoid", "Mul",
                 "Add", "Pad"}


def load_onnx_model(path: str):
  import onnx

  if not os.path.exists(path):
    raise ConversionError(f"model {path!r} does not exist")
  try:
    model = onnx.load(path)
    onnx.checker.check_model(model)
  except Exception as e:
    raise ConversionError(f"cannot read ONNX model {path!r}: {first_line(e)}") from e
  for init in model.graph.initializer:
    if init.data_type not in (onnx.TensorProto.FLOAT, onnx.TensorProto.INT64,
                              onnx.TensorProto.INT32):
      raise ConversionError(f"model {path!r} is not a float32 model (initializer"
                            f" {init.name} has ONNX type {init.data_type})")
  return model


class _Graph:
  def __init__(self, model):
    from onnx import numpy_helper

    self.model = model
    self.consts = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    for node in model.graph.node:
      if node.op_type == "Constant":
        for a in node.attribute:
          if a.name == "value":
            self.consts[node.output[0]] = numpy_helper.to_array(a.t)
    self.producer = {o: n for n in model.graph.node for o in n.output}
    self.consumers: dict[str, list] = {}
    for n in model.graph.node:
      for i in n.input:
        self.consumers.setdefault(i, []).append(n)

  def resolve(self, name: str) -> np.ndarray | None:
    """The constant value of tensor `name`, looking through Identity and Cast.

    A PyTorch export without constant folding routes parameters through
    Identity nodes and Clip bounds through Cast nodes.
    """
    from onnx import helper

    for _ in range(8):
      if name in self.consts:
        return self.consts[name]
      node = self.producer.get(name)
      if node is None or node.op_type not in ("Identity", "Cast"):
        return None
      if node.op_type == "Cast":
        value = self.resolve(node.input[0])
        if value is None:
          return None
        to = helper.tensor_dtype_to_np_dtype(node_attr(node, "to"))
        return value.astype(to)
      name = node.input[0]
    return None

  def const(self, name: str, what: str) -> np.ndarray:
    value = self.resolve(name)
    if value is None:
      raise ConversionError(f"{what} ({name}) is not a constant")
    return value


def _node_name(node) -> str:
  return node.name or node.output[0]


def _activation_after(g: _Graph, bn) -> str:
  outs = g.consumers.get(bn.output[0], [])
  if len(outs) != 1:
    return "none"
  n = outs[0]
  if n.op_type == "Relu":
    return "relu"
  if n.op_type == "Clip":
    lo = node_attr(n, "min")
    hi = node_attr(n, "max")
    if len(n.input) > 1 and n.input[1]:
      v = g.resolve(n.input[1])
      lo = float(v) if v is not None else None
    if len(n.input) > 2 and n.input[2]:
      v = g.resolve(n.input[2])
      hi = float(v) if v is not None else None
    if lo == 0.0 and hi == 6.0:
      return "relu6"
  return "none"


def _conv_kind(g: _Graph, conv) -> str:
  w = g.const(conv.input[1], f"weights of {_node_name(conv)}")
  group = int(node_attr(conv, "group", 1))
  if w.ndim != 4:
    raise ConversionError(f"conv {_node_name(conv)}: only 2-D convolutions are supported")
  if group == 1:
    return "conv"
  if w.shape[1] == 1:  # One input channel per group: depthwise (multiplier O/group).
    return "depthwise"
  raise ConversionError(f"conv {_node_name(conv)} is a grouped convolution (group={group}),"
                        " which TFLite has no folded form for")


def _reject_hidden_conv(g: _Graph, bn) -> None:
  chain, node = [], g.producer.get(bn.input[0])
  for _ in range(3):
    if node is None:
      return
    if node.op_type == "Conv":
      between = ", ".join(f"{_node_name(n)} ({n.op_type})" for n in chain)
      raise ConversionError(f"unsupported layer between conv {_node_name(node)} and BN"
                            f" {_node_name(bn)}: {between}")
    if node.op_type not in _PASS_THROUGH:
      return
    chain.insert(0, node)
    node = g.producer.get(node.input[0])


def find_onnx_sites(model) -> list[BNSite]:
  g = _Graph(model)
  sites = []
  for bn in model.graph.node:
    if bn.op_type != "BatchNormalization":
      continue
    conv = g.producer.get(bn.input[0])
    if conv is None or conv.op_type != "Conv":
      _reject_hidden_conv(g, bn)
      continue
    if [n.name for n in g.consumers.get(conv.output[0], [])] != [bn.name]:
      raise ConversionError(f"conv {_node_name(conv)} feeds more than BN {_node_name(bn)};"
                            " BN cannot be folded")
    if int(node_attr(bn, "training_mode", 0)):
      raise ConversionError(f"BN {_node_name(bn)} was exported in training mode; export the"
                            " model in eval mode")
    kind = _conv_kind(g, conv)
    gamma = g.const(bn.input[1], f"scale of {_node_name(bn)}").astype(np.float32)
    beta = g.const(bn.input[2], f"bias of {_node_name(bn)}").astype(np.float32)
    var = g.const(bn.input[4], f"variance of {_node_name(bn)}")
    eps = float(node_attr(bn, "epsilon", 1e-5))
    w = g.const(conv.input[1], "conv weights").astype(np.float64)  # [O, I/g, kH, kW]
    scale = fold_scale(gamma, var, eps)
    folded = w * scale[:, None, None, None]
    if kind == "conv":
      folded = folded.transpose(0, 2, 3, 1)            # -> [O, kH, kW, I]
    else:
      folded = folded.transpose(1, 2, 3, 0)            # -> [1, kH, kW, O]
    sites.append(BNSite(name=_node_name(bn), conv=_node_name(conv), kind=kind,
                        activation=_activation_after(g, bn), beta=beta,
                        gamma_abs=np.abs(gamma), eps=eps,
                        folded_kernel=folded.astype(np.float32)))
  if not sites:
    if any(n.op_type == "BatchNormalization" for n in model.graph.node):
      raise ConversionError("no Conv->BatchNormalization sites in the ONNX model: none of"
                            " its BatchNormalization nodes follows a Conv")
    # The graph cannot tell a model that never had BN from one whose exporter folded it.
    raise ConversionError("no Conv->BatchNormalization sites: the ONNX model has no"
                          " BatchNormalization nodes (never had BN, or BN folded at export:"
                          " PyTorch: export with do_constant_folding=False,"
                          " training=TrainingMode.PRESERVE; tf2onnx always folds BN: convert"
                          " the .keras model; without BN: convert the model's full-int8"
                          " .tflite, whose targets are measured)")
  return sites


def input_shape_nhwc(model) -> tuple[int, int, int]:
  inits = {i.name for i in model.graph.initializer}
  inputs = [i for i in model.graph.input if i.name not in inits]
  if len(inputs) != 1:
    raise ConversionError(f"expected one image input, the model has {len(inputs)}")
  dims = [d.dim_value for d in inputs[0].type.tensor_type.shape.dim]
  if len(dims) != 4 or not all(dims[1:]):
    raise ConversionError(f"expected an NCHW image input with static C, H, W; got {dims}")
  _, c, h, w = dims
  return (h, w, c)


def run_with_bn_outputs(model, sites: list[BNSite], nhwc_inputs: np.ndarray
                        ) -> tuple[np.ndarray, dict[str, list[np.ndarray]]]:
  """The model's output and each site's BN output (NHWC), from onnxruntime."""
  import onnx
  import onnxruntime as ort

  m = onnx.ModelProto()
  m.CopyFrom(model)
  bn_out = {n.output[0]: _node_name(n) for n in m.graph.node
            if n.op_type == "BatchNormalization"}
  wanted = [o for o, name in bn_out.items() if name in {s.name for s in sites}]
  for o in wanted:
    m.graph.output.append(onnx.helper.make_empty_tensor_value_info(o))
  sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
  input_name = sess.get_inputs()[0].name
  out_name = model.graph.output[0].name
  values: dict[str, list[np.ndarray]] = {bn_out[o]: [] for o in wanted}
  outputs = []
  nchw = np.ascontiguousarray(nhwc_inputs.transpose(0, 3, 1, 2))
  batch = 1 if isinstance(sess.get_inputs()[0].shape[0], int) else 100
  for i in range(0, len(nchw), batch):
    outs = sess.run([out_name] + wanted, {input_name: nchw[i:i + batch]})
    outputs.append(outs[0])
    for o, v in zip(wanted, outs[1:]):
      values[bn_out[o]].append(v.transpose(0, 2, 3, 1))
  return np.concatenate(outputs), values


def bn_output_ranges_onnx(model, sites: list[BNSite], nhwc_inputs: np.ndarray):
  """Min/max of each site's BN output, from onnxruntime with BN outputs exposed."""
  from forge_tflm.converter.calibration import range_stats

  _, values = run_with_bn_outputs(model, sites, nhwc_inputs)
  return range_stats(values)


@contextlib.contextmanager
def offline_onnx2tf(workdir: str, calibration_nhwc: np.ndarray):
  """Runs onnx2tf with its sample-image file present and its HTTP client disabled."""
  import onnx2tf.utils.common_functions as cf

  sample = np.zeros((20, 128, 128, 3), np.float32)
  # Real calibration images (nearest-neighbour resized) rather than zeros keep any
  # onnx2tf-internal checks meaningful.
  h, w = calibration_nhwc.shape[1:3]
  ys = (np.arange(128) * h // 128)[:, None]
  xs = (np.arange(128) * w // 128)[None, :]
  n = min(20, len(calibration_nhwc))
  if calibration_nhwc.shape[-1] == 3 and n:
    sample[:n] = calibration_nhwc[:n][:, ys, xs, :]
  np.save(os.path.join(workdir, ONNX2TF_SAMPLE_FILE), sample)

  def no_network(*args, **kwargs):
    raise ConversionError("onnx2tf tried to download data; forge_tflm runs it offline")

  saved_get, saved_cwd = cf.requests.get, os.getcwd()
  cf.requests.get = no_network
  os.chdir(workdir)
  try:
    yield
  finally:
    os.chdir(saved_cwd)
    cf.requests.get = saved_get


def onnx_to_saved_model(path: str, workdir: str, calibration_nhwc: np.ndarray) -> str:
  import onnx2tf

  out = os.path.join(workdir, "saved_model")
  with offline_onnx2tf(workdir, calibration_nhwc):
    try:
      # disable_model_save: onnx2tf hands back its Keras model and writes nothing; the
      # SavedModel is saved here as onnx2tf saves it, without the float32 and float16
      # .tflite files it would convert next and this converter never reads (~40% of an
      # ONNX conversion).
      model = onnx2tf.convert(input_onnx_file_path=os.path.abspath(path),
                              output_folder_path=out, non_verbose=True,
                              not_use_onnxsim=True, verbosity="error",
                              disable_model_save=True)
      import tensorflow as tf
      tf.saved_model.save(model, out)
    except SystemExit as e:  # onnx2tf reports some failures with sys.exit.
      raise ConversionError(f"onnx2tf failed (exit {e.code})") from e
    except ConversionError:
      raise
    except Exception as e:
        raise ConversionError(f"onnx2tf failed: {first_line(e)}") from e
  return out


def convert_onnx(model, calibration_nhwc: np.ndarray) -> tuple[bytes, bytes]:
  """(float, full-int8) TFLite flatbuffers, both from one onnx2tf SavedModel."""
  import onnx

  from forge_tflm.converter.quantize import convert_saved_model

  with tempfile.TemporaryDirectory(prefix="forge_onnx2tf_") as workdir:
    path = os.path.join(workdir, "model.onnx")
    onnx.save(model, path)
    saved_model = onnx_to_saved_model(path, workdir, calibration_nhwc)
    return (convert_saved_model(saved_model, None),
            convert_saved_model(saved_model, calibration_nhwc))


class OnnxFrontend:
  """The ONNX model behind the converter's passes."""

  name = "onnx"

  def __init__(self, path: str):
    self.path = path
    model = load_onnx_model(path)
    self.source_model = model  # As exported: the parity gate's reference.
    model, pinned = onnx_fold.pin_batch(model)
    model, folded = onnx_fold.fold_constants(model)
    model, shortcuts = onnx_rewrite.subsample_pad_to_conv(model)
    model, normalization = onnx_rewrite.input_affine_to_depthwise(model)
    if pinned or folded or shortcuts or normalization:
      logging.info("ONNX graph: batch pinned to 1: %s; %d constant nodes folded, %d "
                   "subsample+pad shortcuts as 1x1 convolutions, %d input normalization"
                   " ops as one depthwise convolution", pinned, folded, shortcuts,
                   normalization)
    self.model = model

  @property
  def input_shape(self) -> tuple[int, ...]:
    return input_shape_nhwc(self.model)

  def find_sites(self) -> list[BNSite]:
    return find_onnx_sites(self.model)

  def convert_tflite(self, calibration_inputs: np.ndarray) -> tuple[bytes, bytes]:
    return convert_onnx(self.model, calibration_inputs)

  def reference(self, inputs: np.ndarray, sites: list[BNSite]):
    """(model outputs, {site: BN output NHWC}) of the source model (onnxruntime)."""
    outputs, values = run_with_bn_outputs(self.source_model, sites, inputs)
    return outputs, {k: np.concatenate(v) for k, v in values.items()}

  def bn_output_ranges(self, sites: list[BNSite], calibration_inputs: np.ndarray):
    return bn_output_ranges_onnx(self.model, sites, calibration_inputs)
