"""Converter options (frozen) and the model's input contract."""

from __future__ import annotations

import dataclasses

import numpy as np

from forge_tflm.ops import RecalibOptions


@dataclasses.dataclass(frozen=True)
class InputContract:
  """How uint8 pixels become the float input the model was trained on.

  kind "range": x = low + pixel / 255 * (high - low).
  kind "normalize": x = (pixel / 255 - mean[c]) / std[c].
  """

  kind: str = "range"
  low: float = 0.0
  high: float = 1.0
  mean: tuple[float, ...] = ()
  std: tuple[float, ...] = ()

  def __post_init__(self):
    if self.kind == "range":
      if not self.high > self.low:
        raise ValueError(f"input range needs high > low, got [{self.low}, {self.high}]")
    elif self.kind == "normalize":
      if len(self.mean) != len(self.std) or not self.mean:
        raise ValueError("normalize needs mean and std of the same (non-zero) length")
      if any(s <= 0 for s in self.std):
        raise ValueError("normalize std must be > 0")
    else:
      raise ValueError(f"input contract kind must be 'range' or 'normalize', not {self.kind!r}")

  def to_float(self, pixels: np.ndarray) -> np.ndarray:
    x = np.asarray(pixels, np.float32) / np.float32(255.0)
    if self.kind == "range":
      return (np.float32(self.low) + x * np.float32(self.high - self.low)).astype(np.float32)
    return ((x - np.asarray(self.mean, np.float32)) / np.asarray(self.std, np.float32)
            ).astype(np.float32)

  def to_json(self) -> dict:
    if self.kind == "range":
      return {"kind": "range", "low": self.low, "high": self.high,
              "pixel_to_float": "low + pixel/255*(high-low)"}
    return {"kind": "normalize", "mean": list(self.mean), "std": list(self.std),
            "pixel_to_float": "(pixel/255 - mean[c]) / std[c]"}


@dataclasses.dataclass(frozen=True)
class ConvertOptions:
  """What `convert` does.

  sites: "all", "none", or a tuple of site names to adapt.
  recalib: the FORGE options of every site (validated when made, so bad options
    fail before any conversion work); each site's activation comes from the model.
  eps_from_bn: each site uses its BN's own epsilon instead of recalib.eps.
  calibration_size: images of the calibration set used for int8 ranges.
  preact_range: "minmax" or "percentile:<p>" (e.g. percentile:99.99) for the new
    pre-activation ranges of conv outputs whose activation moves into FORGE.
  c_array: also write <output>.cc/.h with the model as an alignas(16) array.
  """

  sites: str | tuple[str, ...] = "all"
  recalib: RecalibOptions = RecalibOptions(window=640)
  eps_from_bn: bool = True
  input_contract: InputContract = InputContract()
  calibration_size: int = 300
  calibration_seed: int = 0
  preact_range: str = "minmax"
  c_array: bool = False

  def __post_init__(self):
    if not isinstance(self.recalib, RecalibOptions):
      raise ValueError("recalib must be a RecalibOptions")
    if self.calibration_size < 1:
      raise ValueError("calibration_size must be >= 1")
    if self.preact_range != "minmax":
      kind, _, p = self.preact_range.partition(":")
      try:
        ok = kind == "percentile" and 50.0 < float(p) <= 100.0
      except ValueError:
        ok = False
      if not ok:
        raise ValueError(f"preact_range must be 'minmax' or 'percentile:<50..100>',"
                         f" not {self.preact_range!r}")
