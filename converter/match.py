"""Find each site's conv in the converted model by its weights.

TFLite op order and tensor names are converter implementation details; the
BN-folded kernel is not. Each CONV_2D / DEPTHWISE_CONV_2D weight tensor is
dequantized (per-channel int8; a float model's is used as it is) and compared with every site's folded float
kernel of the same shape; a site matches when the worst per-channel error is
within int8 rounding of that channel's range, and exactly one conv does.
"""

from __future__ import annotations

import numpy as np

from forge_tflm import tflite_graph as tg
from forge_tflm.converter.sites import BNSite, ConversionError

_OP_KIND = {"CONV_2D": "conv", "DEPTHWISE_CONV_2D": "depthwise"}
# int8 rounding error is <= 0.5/127 of a channel's max |w|; allow float noise on top.
_TOLERANCE = 1.5 / 127


def _dequantized_kernel(model, tensor) -> np.ndarray | None:
  """The kernel as float: int8 per-channel dequantized, or a float model's own."""
  q = tensor.quantization
  data = tg.buffer_array(model, tensor)
  if data is not None and data.dtype == np.float32:
    return data.astype(np.float64)
  if data is None or q is None or q.scale is None:
    return None
  scale = np.asarray(q.scale, np.float64)
  zp = np.asarray(q.zeroPoint, np.float64)
  axis = q.quantizedDimension
  shape = [1] * data.ndim
  shape[axis] = -1
  return (data.astype(np.float64) - zp.reshape(shape)) * scale.reshape(shape)


def _relative_error(kernel: np.ndarray, folded: np.ndarray, kind: str) -> float:
  axis = 0 if kind == "conv" else 3  # Output-channel axis in TFLite layout.
  moved_k = np.moveaxis(kernel, axis, 0).reshape(kernel.shape[axis], -1)
  moved_f = np.moveaxis(folded.astype(np.float64), axis, 0).reshape(folded.shape[axis], -1)
  ranges = np.maximum(np.abs(moved_f).max(axis=1), 1e-12)
  return float((np.abs(moved_k - moved_f).max(axis=1) / ranges).max())


def match_sites(model: "tg.schema.ModelT", sites: list[BNSite]) -> dict[str, int]:
  """Site name -> operator index in subgraph 0. ConversionError when ambiguous."""
  subgraph = model.subgraphs[0]
  candidates: list[tuple[int, str, np.ndarray]] = []
  for i, op in enumerate(subgraph.operators):
    kind = _OP_KIND.get(tg.op_name(model, op))
    if kind is None:
      continue
    kernel = _dequantized_kernel(model, subgraph.tensors[op.inputs[1]])
    if kernel is not None:
      candidates.append((i, kind, kernel))
  result: dict[str, int] = {}
  claimed: dict[int, str] = {}
  for site in sites:
    hits = [i for i, kind, kernel in candidates
            if kind == site.kind and kernel.shape == site.folded_kernel.shape
            and _relative_error(kernel, site.folded_kernel, kind) <= _TOLERANCE]
    if not hits:
      raise ConversionError(
          f"site {site.name}: no {site.kind} op in the converted model has its folded"
          " weights (was BN folded?)")
    if len(hits) > 1:
      raise ConversionError(f"site {site.name}: {len(hits)} convs have the same folded"
                            " weights; cannot tell them apart")
    if hits[0] in claimed:
      raise ConversionError(f"sites {claimed[hits[0]]} and {site.name} match the same"
                            f" conv (op {hits[0]})")
    claimed[hits[0]] = site.name
    result[site.name] = hits[0]
  return result
