"""Converter options (frozen, validated when made)."""

from __future__ import annotations

import dataclasses

from forge_tflm.artifact import TARGET_SOURCES, InputContract
from forge_tflm.converter import parity
from forge_tflm.ops import RecalibOptions


@dataclasses.dataclass(frozen=True)
class ConvertOptions:
  """What `convert` does.

  sites: "all", "none", or a tuple of site names to adapt.
  targets: "measured" (each site's clean per-channel mean and std, measured on the
    plain int8 model's conv output over the calibration images) or "recorded" (a
    float model's BN statistics at fold time, the paper's design).
  recalib: the FORGE options of every site (validated when made, so bad options
    fail before any conversion work); each site's activation comes from the model.
  eps_from_bn: each site uses its BN's own epsilon instead of recalib.eps.
  calibration_size: images of the calibration set used for int8 ranges.
  preact_range: with recorded targets, "minmax" or "percentile:<p>" (e.g.
    percentile:99.99) for the new pre-activation ranges of conv outputs whose
    activation moves into FORGE.
  c_array: also write <output>.cc/.h with the model as an alignas(16) array.
  parity_check: "error" refuses a conversion whose float model differs from the
    source beyond parity_tolerance (converter/parity.py); "warn" logs and writes it.
  parity_images: calibration images the parity gate compares on.
  clean_check: "error" refuses an int8 model below twice chance on its labelled
    calibration images (converter/clean_check.py); "warn" logs and writes it (a model
    with untrained weights, say).
  source_agreement: from an int8 .tflite, the least top-1 agreement (on the
    calibration images) of the artifact in source mode with the input model.
  """

  sites: str | tuple[str, ...] = "all"
  targets: str = "measured"
  recalib: RecalibOptions = RecalibOptions(window=640)
  eps_from_bn: bool = True
  input_contract: InputContract = InputContract()
  calibration_size: int = 300
  calibration_seed: int = 0
  preact_range: str = "minmax"
  c_array: bool = False
  parity_check: str = "error"
  clean_check: str = "error"
  parity_tolerance: float = parity.DEFAULT_TOLERANCE
  parity_images: int = parity.DEFAULT_IMAGES
  source_agreement: float = parity.DEFAULT_SOURCE_AGREEMENT

  def __post_init__(self):
    if not isinstance(self.recalib, RecalibOptions):
      raise ValueError("recalib must be a RecalibOptions")
    if self.targets not in TARGET_SOURCES:
      raise ValueError(f"targets must be one of {TARGET_SOURCES}, not {self.targets!r}")
    if self.calibration_size < 1:
      raise ValueError("calibration_size must be >= 1")
    if self.parity_check not in parity.MODES:
      raise ValueError(f"parity_check must be one of {parity.MODES}, not {self.parity_check!r}")
    if self.clean_check not in parity.MODES:
      raise ValueError(f"clean_check must be one of {parity.MODES}, not {self.clean_check!r}")
    if not self.parity_tolerance > 0:
      raise ValueError(f"parity_tolerance must be > 0, got {self.parity_tolerance}")
    if not 0.0 <= self.source_agreement <= 1.0:
      raise ValueError(f"source_agreement must be in [0, 1], got {self.source_agreement}")
    if self.parity_images < 1:
      raise ValueError("parity_images must be >= 1")
    if self.preact_range != "minmax":
      kind, _, p = self.preact_range.partition(":")
      try:
        ok = kind == "percentile" and 50.0 < float(p) <= 100.0
      except ValueError:
        ok = False
      if not ok:
        raise ValueError(f"preact_range must be 'minmax' or 'percentile:<50..100>',"
                         f" not {self.preact_range!r}")
