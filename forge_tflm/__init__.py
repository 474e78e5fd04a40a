"""forge_tflm: forward-only BatchNorm re-estimation (FORGE) for int8 TFLite/TFLM models.

The public API, imported lazily so that `forge_tflm --help` stays fast:

    convert, ConvertOptions, ConversionError      float model -> FORGE .tflite + manifest
    Artifact, Manifest, SiteRecord, InputContract the .tflite + manifest, typed
    ArtifactError, check_model                    (the model checks every loader runs)
    SegmentedModel                                run a FORGE .tflite in LiteRT
    RecalibOptions, RecalibOp, RecalibState,      the op: options, a prepared node,
    QuantParams, forge_recalib_c,                 state, the C core and the numpy
    forge_recalib_reference                       definition
    load_dataset, ImageSet                        datasets
    corrupt, CORRUPTIONS, HELD_OUT_CORRUPTIONS    CIFAR-C / Tiny-ImageNet-C corruptions
    evaluate, EvalConfig, GateConfig              the evaluation protocol
    select, SelectConfig                          layer selection on held-out corruptions
    make_executor                                 where sweep units run (inline, processes, Ray)
    run_experiment, ExperimentContext,            the paper's experiments
    EXPERIMENTS
    (forge_tflm.evaluation is the subpackage, forge_tflm.evaluate the function)
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "convert": "forge_tflm.converter.pipeline",
    "ConvertOptions": "forge_tflm.converter.options",
    "ConversionError": "forge_tflm.converter.sites",
    "Artifact": "forge_tflm.artifact",
    "ArtifactError": "forge_tflm.artifact",
    "InputContract": "forge_tflm.artifact",
    "Manifest": "forge_tflm.artifact",
    "SiteRecord": "forge_tflm.artifact",
    "check_model": "forge_tflm.model_check",
    "SegmentedModel": "forge_tflm.runtime.segmented",
    "RecalibOptions": "forge_tflm.ops",
    "RecalibOp": "forge_tflm.ops",
    "RecalibState": "forge_tflm.ops",
    "QuantParams": "forge_tflm.ops",
    "forge_recalib_c": "forge_tflm.ops",
    "forge_recalib_reference": "forge_tflm.ops",
    "load_dataset": "forge_tflm.data",
    "ImageSet": "forge_tflm.data",
    "corrupt": "forge_tflm.corruptions",
    "CORRUPTIONS": "forge_tflm.corruptions",
    "HELD_OUT_CORRUPTIONS": "forge_tflm.corruptions",
    "EvalConfig": "forge_tflm.evaluation.protocol",
    "GateConfig": "forge_tflm.evaluation.gate",
    "evaluate": "forge_tflm.evaluation.protocol",
    "select": "forge_tflm.evaluation.selection",
    "SelectConfig": "forge_tflm.evaluation.selection",
    "make_executor": "forge_tflm.sweep",
    "run_experiment": "forge_tflm.experiments",
    "ExperimentContext": "forge_tflm.experiments",
    "EXPERIMENTS": "forge_tflm.experiments",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str):
  if name in _EXPORTS:
    return getattr(importlib.import_module(_EXPORTS[name]), name)
  raise AttributeError(f"module 'forge_tflm' has no attribute {name!r}")


def __dir__():
  return __all__
