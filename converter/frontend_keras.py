"""Keras 3 front end: load a float model and find its Conv->BN(->ReLU/ReLU6) sites.

The graph is read from the model config (inbound nodes name their producers),
which works the same for functional models, Sequential models and models nested
inside either. Only recording happens here; nothing is rewritten.
"""

from __future__ import annotations

import os
import zipfile
from typing import Iterator

import numpy as np

from forge_tflm.converter.sites import BNSite, ConversionError, first_line, fold_scale

# Layers that keep the shape and would silently sit between a conv and its BN.
_MAX_WALK_BACK = 3


def load_keras_model(path: str):
  import keras

  if not os.path.exists(path):
    raise ConversionError(f"model {path!r} does not exist")
  try:
    if os.path.isdir(path):
      # A SavedModel directory: Keras 3 reads it only as an inference layer,
      # which hides the layer graph we need.
      raise ConversionError(
          f"{path!r} is a SavedModel directory; convert from the .keras file (the layer"
          " graph is needed to find Conv->BN sites)")
    legacy = path.lower().endswith(".h5")
    if legacy and not _is_hdf5(path):
      raise ConversionError(f"cannot read Keras model {path!r}: not an HDF5 file"
                            " (truncated or another format)")
    if not legacy and not zipfile.is_zipfile(path):
      # Keras says "File not found" for a file that exists but is cut short.
      raise ConversionError(f"cannot read Keras model {path!r}: not a .keras zip archive"
                            " (truncated or another format)")
    model = keras.saving.load_model(path, compile=False)
  except ConversionError:
    raise
  except Exception as e:
    raise ConversionError(f"cannot read Keras model {path!r}: {first_line(e)}") from e
  for w in model.weights:
    if not str(w.dtype).startswith("float"):
      raise ConversionError(
          f"model {path!r} is not a float model (weight {w.path} is {w.dtype})")
  return model


def _is_hdf5(path: str) -> bool:
  with open(path, "rb") as f:
    return f.read(8) == b"\x89HDF\r\n\x1a\n"


def _producer_names(inbound_nodes) -> list[str]:
  names: list[str] = []

  def visit(obj):
    if isinstance(obj, dict):
      if "keras_history" in obj.get("config", {}):
        names.append(obj["config"]["keras_history"][0])
        return
      for v in obj.values():
        visit(v)
    elif isinstance(obj, (list, tuple)):
      for v in obj:
        visit(v)

  visit(inbound_nodes)
  return names


def _graph(model) -> tuple[dict, dict[str, list[str]]]:
  """(layers by name, producers by layer name) for one (sub)model."""
  import keras

  layers = {l.name: l for l in model.layers}
  producers: dict[str, list[str]] = {}
  if isinstance(model, keras.Sequential):
    previous = None
    for layer in model.layers:
      producers[layer.name] = [previous] if previous else []
      previous = layer.name
  else:
    for cfg in model.get_config()["layers"]:
      producers[cfg["name"]] = _producer_names(cfg.get("inbound_nodes", []))
  return layers, producers


def _activation_of(layer) -> str | None:
  import keras

  if isinstance(layer, keras.layers.ReLU):
    if float(layer.negative_slope) != 0.0 or float(layer.threshold) != 0.0:
      return None
    if layer.max_value is None:
      return "relu"
    return "relu6" if float(layer.max_value) == 6.0 else None
  if isinstance(layer, keras.layers.Activation):
    name = getattr(layer.activation, "__name__", "")
    return name if name in ("relu", "relu6") else None
  return None


def _conv_kind(layer) -> str | None:
  import keras

  if isinstance(layer, keras.layers.DepthwiseConv2D):
    return "depthwise"
  if type(layer) is keras.layers.Conv2D:
    return "conv"
  return None


def _folded_kernel(conv, bn) -> np.ndarray:
  kernel = np.asarray(conv.kernel.numpy(), np.float64)
  gamma = (np.asarray(bn.gamma.numpy()) if bn.scale else np.ones(bn.moving_variance.shape))
  scale = fold_scale(gamma, bn.moving_variance.numpy(), bn.epsilon)
  if _conv_kind(conv) == "depthwise":
    h, w, c, mult = kernel.shape
    folded = kernel.reshape(h, w, c * mult) * scale
    return folded[None].astype(np.float32)
  return (kernel * scale).transpose(3, 0, 1, 2).astype(np.float32)


def _walk(model, prefix: str) -> Iterator[BNSite]:
  import keras

  layers, producers = _graph(model)
  consumers: dict[str, list[str]] = {}
  for name, srcs in producers.items():
    for s in srcs:
      consumers.setdefault(s, []).append(name)
  for name, layer in layers.items():
    if isinstance(layer, keras.Model):
      yield from _walk(layer, f"{prefix}{name}/")
      continue
    if not isinstance(layer, keras.layers.BatchNormalization):
      continue
    srcs = producers.get(name, [])
    if len(srcs) != 1:
      continue
    conv = layers[srcs[0]]
    kind = _conv_kind(conv)
    if kind is None:
      _reject_hidden_conv(layers, producers, name, srcs[0])
      continue
    axis = layer.axis if isinstance(layer.axis, int) else layer.axis[0]
    if axis not in (-1, 3):
      raise ConversionError(f"BN {prefix}{name} normalizes axis {axis}; only channels-last"
                            " (axis -1) folds into a TFLite conv")
    if getattr(conv, "activation", None) is not None and \
        getattr(conv.activation, "__name__", "linear") != "linear":
      raise ConversionError(
          f"unsupported layer between conv and BN: {prefix}{conv.name} has a built-in"
          f" {conv.activation.__name__} activation before BN {prefix}{name}")
    if consumers.get(conv.name, []) != [name]:
      raise ConversionError(
          f"conv {prefix}{conv.name} feeds {consumers.get(conv.name)} besides BN"
          f" {prefix}{name}; BN cannot be folded")
    outs = consumers.get(name, [])
    activation = "none"
    if len(outs) == 1:
      activation = _activation_of(layers[outs[0]]) or "none"
    gamma = layer.gamma.numpy() if layer.scale else np.ones(layer.moving_mean.shape)
    beta = layer.beta.numpy() if layer.center else np.zeros(layer.moving_mean.shape)
    yield BNSite(
        name=f"{prefix}{name}", conv=f"{prefix}{conv.name}", kind=kind,
        activation=activation,
        beta=np.asarray(beta, np.float32), gamma_abs=np.abs(np.asarray(gamma, np.float32)),
        eps=float(layer.epsilon), folded_kernel=_folded_kernel(conv, layer))


def _reject_hidden_conv(layers, producers, bn_name: str, first: str) -> None:
  """Raises if a conv sits behind shape-preserving single-input layers of a BN."""
  chain, current = [], first
  shape = tuple(layers[bn_name].input.shape) if hasattr(layers[bn_name], "input") else None
  for _ in range(_MAX_WALK_BACK):
    layer = layers.get(current)
    if layer is None:
      return
    if _conv_kind(layer) is not None:
      between = ", ".join(f"{n} ({type(layers[n]).__name__})" for n in chain)
      raise ConversionError(f"unsupported layer between conv {current} and BN {bn_name}:"
                            f" {between}")
    try:
      if shape is not None and tuple(layer.output.shape) != shape:
        return
    except (AttributeError, ValueError):
      return
    srcs = producers.get(current, [])
    if len(srcs) != 1:
      return
    chain.insert(0, current)
    current = srcs[0]


def find_keras_sites(model) -> list[BNSite]:
  """All Conv->BN sites of `model`, in graph order; ConversionError if none."""
  sites = list(_walk(model, ""))
  if not sites:
    raise ConversionError(f"no Conv->BatchNormalization sites in model {model.name!r}")
  return sites


class KerasFrontend:
  """The Keras model behind the converter's passes."""

  name = "keras"

  def __init__(self, path: str):
    self.path = path
    self.model = load_keras_model(path)

  @property
  def input_shape(self) -> tuple[int, ...]:
    return tuple(self.model.input_shape[1:])

  def find_sites(self) -> list[BNSite]:
    return find_keras_sites(self.model)

  def convert_tflite(self, calibration_inputs: np.ndarray) -> tuple[bytes, bytes]:
    """(float, full-int8) TFLite flatbuffers of the model."""
    from forge_tflm.converter.quantize import convert_keras
    return convert_keras(self.model, None), convert_keras(self.model, calibration_inputs)

  def reference(self, inputs: np.ndarray, sites: list[BNSite]):
    """(model outputs, {site: BN output NHWC}) of the source model (Keras)."""
    from forge_tflm.converter.calibration import record_bn_outputs
    outputs, sink = record_bn_outputs(self.model, sites, inputs)
    return outputs, {k: np.concatenate(v) for k, v in sink.items()}

  def bn_output_ranges(self, sites: list[BNSite], calibration_inputs: np.ndarray):
    from forge_tflm.converter.calibration import bn_output_ranges
    return bn_output_ranges(self.model, sites, calibration_inputs)
