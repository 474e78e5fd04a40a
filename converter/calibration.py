"""Calibration: the representative images and the pre-activation ranges of sites.

When a site's activation moves from the conv into FORGE_RECALIB, the conv
output must represent negative values too, so it needs a new (pre-activation)
int8 range. It is measured on the float model: the BN outputs of the sites over
the calibration images, recorded by wrapping each BN layer's call while the model
runs eagerly (this works for nested models too).
"""

from __future__ import annotations

import contextlib
import dataclasses

import numpy as np

from forge_tflm import tflite_graph as tg
from forge_tflm.converter.sites import BNSite, ConversionError
from forge_tflm.data.imageset import ImageSet


@dataclasses.dataclass(frozen=True)
class RangeStats:
  low: float
  high: float
  count: int
  values: np.ndarray  # A subsample, to count saturation for clipped ranges.


def _layer_by_path(model, path: str):
  layer = model
  for part in path.split("/"):
    layer = layer.get_layer(part)
  return layer


@contextlib.contextmanager
def _recording(layers: dict[str, object], sink: dict[str, list[np.ndarray]],
               inputs: bool = False):
  """Appends each layer's output (or, with inputs, its first input) per call to
  sink[name] while the model runs eagerly."""
  originals = {}
  for name, layer in layers.items():
    originals[name] = layer.call

    def wrapped(*args, __name=name, __call=layer.call, **kwargs):
      out = __call(*args, **kwargs)
      sink.setdefault(__name, []).append(np.asarray(args[0] if inputs else out))
      return out

    layer.call = wrapped
  try:
    yield
  finally:
    for name, layer in layers.items():
      layer.call = originals[name]


def record_bn_outputs(model, sites: list[BNSite], inputs: np.ndarray, batch: int = 100
                      ) -> tuple[np.ndarray, dict[str, list[np.ndarray]]]:
  """The model's outputs over `inputs` and each site's BN output, batch by batch."""
  layers = {s.name: _layer_by_path(model, s.name) for s in sites}
  sink: dict[str, list[np.ndarray]] = {}
  outputs = []
  with _recording(layers, sink):
    for i in range(0, len(inputs), batch):
      outputs.append(np.asarray(model(inputs[i:i + batch], training=False)))
  return np.concatenate(outputs), sink


def bn_output_ranges(model, sites: list[BNSite], inputs: np.ndarray, batch: int = 100,
                     keep: int = 200_000, seed: int = 0) -> dict[str, RangeStats]:
  """Min/max (and a value subsample) of each site's BN output over `inputs`."""
  _, sink = record_bn_outputs(model, sites, inputs, batch)
  return range_stats(sink, keep, seed)


def range_stats(parts_by_site: dict[str, list[np.ndarray]], keep: int = 200_000,
                seed: int = 0) -> dict[str, RangeStats]:
  """Min/max, count and a subsample of `keep` values per site, from its batches."""
  rng = np.random.default_rng(seed)
  stats = {}
  for name, parts in parts_by_site.items():
    flat = np.concatenate([p.reshape(-1) for p in parts])
    sample = flat if flat.size <= keep else rng.choice(flat, keep, replace=False)
    stats[name] = RangeStats(float(flat.min()), float(flat.max()), int(flat.size), sample)
  return stats


def preact_params(stats: RangeStats, method: str) -> tuple[float, int, float]:
  """(scale, zero point, saturated fraction of the calibration values) for a site."""
  if method == "minmax":
    low, high = stats.low, stats.high
  else:
    p = float(method.split(":")[1])
    low = float(np.percentile(stats.values, 100.0 - p))
    high = float(np.percentile(stats.values, p))
  scale, zp = tg.int8_params(low, high)
  q = np.round(stats.values / scale) + zp
  saturated = float(np.mean((q < -128) | (q > 127))) if q.size else 0.0
  return scale, zp, saturated


def calibration_labels(calibration) -> tuple[np.ndarray | None, int]:
  """(labels, number of classes) of an ImageSet, for the clean top-1 check; (None, 0)
  for calibration inputs without labels."""
  if isinstance(calibration, ImageSet):
    return np.asarray(calibration.labels), calibration.num_classes
  return None, 0


def calibration_images(calibration) -> tuple[np.ndarray, str]:
  """(uint8 [N,H,W,C] images, a description) from an ImageSet (labels unused), an
  array, or any iterable of HxWxC images."""
  if isinstance(calibration, ImageSet):
    return calibration.images, calibration.source
  if calibration is None:
    raise ConversionError("no calibration images")
  if isinstance(calibration, np.ndarray):
    images, source = calibration, "array"
  else:
    parts = [np.asarray(im) for im in calibration]
    if not parts:
      raise ConversionError("no calibration images")
    if len({p.shape for p in parts}) != 1:
      raise ConversionError("calibration images differ in shape")
    images, source = np.stack(parts), "iterable"
  if images.ndim != 4 or images.dtype != np.uint8:
    raise ConversionError(f"calibration images must be uint8 [N, H, W, C], got"
                          f" {images.dtype} {list(images.shape)}")
  return images, f"{source} of {len(images)} images"
