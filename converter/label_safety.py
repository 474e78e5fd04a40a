"""Which FORGE sites adapt while the stream's labels look correlated (option label_safe).

A fixed camera that sees one object for many frames hands FORGE a run of one class; a
site that re-normalizes that run removes the class's signal from the features after
it. Where the network keeps its class evidence in per-channel statistics (after
spatial downsampling, near the classifier) that costs the prediction; at the input
resolution the channels describe texture and colour, and adapting them there keeps
most of FORGE's gain under a corruption while a sorted stream barely moves the
prediction (measured: benchmarks/results/label_safe_sites.md). The field controller
runs the op's adapt_safe mode while its detector flags label correlation: the sites
marked here adapt, the others keep the clean targets.

The rule: a site is label-safe when its feature map has the largest spatial size
among the sites (the input-resolution stage). It costs no memory: one option bit.
"""

from __future__ import annotations

import numpy as np

from forge_tflm.converter import insert


def safe_op_indices(model_t, inserted: list) -> set[int]:
  """FORGE op indices of the sites at the largest feature-map size (H * W)."""
  sg = model_t.subgraphs[0]
  area = {}
  for site in inserted:
    shape = sg.tensors[sg.operators[site.op_index].inputs[0]].shape
    area[site.op_index] = int(np.prod(shape[1:-1])) if shape is not None else 0
  top = max(area.values(), default=0)
  return {k for k, a in area.items() if a == top and a > 0}


def mark(model_t, inserted: list) -> list:
  """Sets option label_safe on the label-safe sites' ops; returns `inserted` with the
  options they now carry."""
  safe = safe_op_indices(model_t, inserted)
  return [insert.with_options(model_t, s, s.options.replace(label_safe=1))
          if s.op_index in safe else s for s in inserted]
