"""Class offsets for class-balanced statistics (SPEC "Class-balanced statistics").

Per FORGE site and class k, the clean class-conditional mean of the conv output (the
op's input x, dequantized, averaged over H*W and the class's labelled calibration
images) minus the average of those class means: a [K, C] float32 constant the op
starts its class statistics from (class mean = beta + offset). Measured on the
converted int8 model in source mode (what the op sees on the device), then written
as each FORGE op's fourth input, its option `classes` set to K.
"""

from __future__ import annotations

import math

import numpy as np
from ai_edge_litert import schema_py_generated as schema

from forge_tflm import tflite_graph as tg
from forge_tflm.converter import insert
from forge_tflm.converter.sites import ConversionError


def measure(tflite: bytes, x_int8: np.ndarray, labels: np.ndarray,
            batch: int = 250) -> dict[int, np.ndarray]:
  """FORGE op index -> offsets [K, C] (K = the model's output width)."""
  from forge_tflm.runtime.segmented import SOURCE, SegmentedModel

  model = SegmentedModel(tflite, source="the converted model")
  k = int(np.prod(model.run(x_int8[:1], SOURCE).shape[1:]))
  labels = np.asarray(labels, np.int64)
  if labels.shape != (len(x_int8),):
    raise ConversionError(f"{len(labels)} labels for {len(x_int8)} class images")
  if labels.min() < 0 or labels.max() >= k:
    raise ConversionError(f"class labels must be in [0, {k}) (the model's outputs)")
  missing = sorted(set(range(k)) - set(labels.tolist()))
  if missing:
    raise ConversionError(f"the class images hold no image of class(es) "
                          f"{', '.join(map(str, missing[:10]))}: every class needs some")
  sums = {n.op_index: np.zeros((k, n.state.channels)) for n in model.nodes}

  def capture(node, x, mode):
    q = node.quant
    per_image = (x.reshape(len(x), -1, x.shape[-1]).astype(np.float64) - q.z_x) * q.s_x
    np.add.at(sums[node.op_index], capture.labels, per_image.mean(axis=1))
    return node.op(x, mode=SOURCE)

  model.forge_kernel = capture
  for s in range(0, len(x_int8), batch):
    capture.labels = labels[s:s + batch]
    model.run(x_int8[s:s + batch], SOURCE)
  counts = np.bincount(labels, minlength=k).astype(np.float64)[:, None]
  out = {}
  for op_index, total in sums.items():
    means = total / counts
    out[op_index] = (means - means.mean(axis=0)).astype(np.float32)
  return out


def margin_steps(margin: float, output_scale: float) -> int:
  """A logit lead as the op's option class_margin: output quantization steps,
  ceil(margin / scale), at most 255 (int8 logits cannot lead by more)."""
  if margin <= 0:
    return 0
  return int(min(255, math.ceil(np.float64(margin) / np.float64(output_scale))))


def add_to_model(model: "schema.ModelT", offsets: dict[int, np.ndarray],
                 inserted: list, class_margin: int = 0) -> list:
  """Rewrites the FORGE ops of `offsets` in place (a fourth input, options classes=K
  and class_margin); returns `inserted` (insert.InsertedSite) with the
  options they now carry."""
  sg = model.subgraphs[0]
  by_op = {s.op_index: s for s in inserted}
  out = list(inserted)
  for op_index, values in offsets.items():
    op = sg.operators[op_index]
    site = by_op[op_index]
    options = site.options.replace(classes=values.shape[0], class_margin=class_margin)
    t = schema.TensorT()
    t.shape = list(values.shape)
    t.type = schema.TensorType.FLOAT32
    t.buffer = tg.add_const_buffer(model, values)
    t.name = f"{site.site.name}/forge_class_offsets"
    sg.tensors.append(t)
    op.inputs = list(op.inputs) + [len(sg.tensors) - 1]
    out[out.index(site)] = insert.with_options(model, site, options)
  return out
