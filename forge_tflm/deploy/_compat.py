"""The evaluator pieces deploy builds on, wherever the package currently keeps them
(forge_tflm.evaluate -> forge_tflm.evaluation; manifest dicts -> forge_tflm.artifact),
so that deploy computes exactly what the evaluator computes."""

from __future__ import annotations

import importlib


def evaluation_module(name: str):
  """forge_tflm.evaluation.<name>, or the older forge_tflm.evaluate.<name>."""
  try:
    return importlib.import_module(f"forge_tflm.evaluation.{name}")
  except ModuleNotFoundError:
    return importlib.import_module(f"forge_tflm.evaluate.{name}")


def ordering(n: int, k: int, seed: int):
  return evaluation_module("protocol").ordering(n, k, seed)


def input_contract(manifest: dict | None):
  """The evaluator's InputContract for a manifest JSON dict (None: pixels / 255)."""
  try:
    from forge_tflm.artifact import InputContract
  except ImportError:
    return evaluation_module("run").contract_from_manifest(manifest)
  if not manifest:
    return InputContract()
  return InputContract.from_json(manifest["input"]["contract"])


def run_forge_node(node, x, mode: str):
  """One FORGE node of a SegmentedModel on the host, as SegmentedModel runs it."""
  op = getattr(node, "op", None)
  if op is not None:  # prepared RecalibOp
    return op(x, mode=mode)
  from forge_tflm.ops import forge_recalib_c
  return forge_recalib_c(x, node.state, node.options, node.quant, mode=mode)
