"""forge_tflm: forward-only BatchNorm re-estimation (FORGE) for int8 TFLite/TFLM models.

The public API, imported lazily so that `forge_tflm --help` stays fast:

    convert, ConvertOptions, InputContract   float model -> FORGE .tflite + manifest
    SegmentedModel                           run a FORGE .tflite in LiteRT
    RecalibOptions, RecalibState, QuantParams, forge_recalib_c, forge_recalib_reference
    load_dataset, ImageSet                   datasets
    corrupt, CORRUPTIONS                     CIFAR-C / Tiny-ImageNet-C corruptions
    EvalConfig, GateConfig, evaluate         the evaluation protocol
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "convert": "forge_tflm.converter.pipeline",
    "ConvertOptions": "forge_tflm.converter.options",
    "InputContract": "forge_tflm.converter.options",
    "SegmentedModel": "forge_tflm.runtime.segmented",
    "RecalibOptions": "forge_tflm.ops",
    "RecalibState": "forge_tflm.ops",
    "QuantParams": "forge_tflm.ops",
    "forge_recalib_c": "forge_tflm.ops",
    "forge_recalib_reference": "forge_tflm.ops",
    "load_dataset": "forge_tflm.data",
    "ImageSet": "forge_tflm.data",
    "corrupt": "forge_tflm.corruptions",
    "CORRUPTIONS": "forge_tflm.corruptions",
    "EvalConfig": "forge_tflm.evaluate.protocol",
    "GateConfig": "forge_tflm.evaluate.gate",
    "evaluate": "forge_tflm.evaluate.protocol",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str):
  if name in _EXPORTS:
    return getattr(importlib.import_module(_EXPORTS[name]), name)
  raise AttributeError(f"module 'forge_tflm' has no attribute {name!r}")


def __dir__():
  return __all__
