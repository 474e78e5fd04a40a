"""Methods on the deployable int8 artifact: source, forge, scale-adapt.

All three run the same segmented `.tflite`; they differ only in what the host
does at the FORGE_RECALIB nodes:
  source       FORGE frozen at its clean targets (the artifact, not adapting);
  forge        FORGE adapting (C core), state reset at the start of each stream;
  scale-adapt  the paper's naive baseline: no renormalization, but the int8 range
               of each site's pre-activation tensor is re-estimated from the stream
               (EMA of batch min/max with the op's momentum rule) and the values are
               re-quantized on that grid before the activation.
"""

from __future__ import annotations

import numpy as np

from forge_tflm import tflite_graph as tg
from forge_tflm.ops import ACTIVATIONS
from forge_tflm.runtime.segmented import ADAPT, FROZEN, SOURCE, ForgeNode, SegmentedModel


def override_options(model: SegmentedModel, **overrides) -> None:
  """Replaces the artifact's FORGE options on the host (evaluation sweeps):
  `overrides` are RecalibOptions fields (None = keep the artifact's)."""
  if not any(v is not None for v in overrides.values()):
    return
  for node in model.nodes:
    node.op = node.op.with_options(node.options.replace(**overrides))


class Int8Method:
  """Runs batches through a SegmentedModel; returns float logits."""

  name = ""
  adaptive = False

  def __init__(self, model: SegmentedModel):
    self.model = model

  @classmethod
  def create(cls, model: SegmentedModel, config) -> "Int8Method":
    """The method for an evaluation `config` (EvalConfig) on its own `model`."""
    return cls(model)

  def reset(self) -> None:
    self.model.reset()

  def diagnostics(self) -> dict:
    """What the method records per ordering beside its accuracy (JSON-ready)."""
    return {}

  def logits(self, x_int8: np.ndarray, mode: str) -> np.ndarray:
    return self.model.dequantize_output(self.model.run(x_int8, mode=mode))

  def predict(self, x_int8: np.ndarray) -> np.ndarray:
    raise NotImplementedError


class Source(Int8Method):
  name = "source"

  def predict(self, x_int8):
    return self.logits(x_int8, FROZEN)


class Forge(Int8Method):
  name = "forge"
  adaptive = True

  def predict(self, x_int8):
    return self.logits(x_int8, ADAPT)


class ScaleAdaptKernel:
  """Host step for scale-adapt at one site (float64 math: it is a simulation).

  The step maps each int8 value through a function fixed per batch, so it is
  applied as a 256-entry table built from `requantize` (same bits as applying
  `requantize` to every element, at the cost of a table lookup).
  """

  def __init__(self, node: ForgeNode):
    self.node = node
    q = node.quant
    self.initial = (q.s_x * (-128 - q.z_x), q.s_x * (127 - q.z_x))
    self.reset()

  def reset(self):
    self.low, self.high = self.initial

  def requantize(self, x: np.ndarray) -> np.ndarray:
    """int8 pre-activation -> int8 output on the current [low, high] grid."""
    q = self.node.quant
    real = q.s_x * (x.astype(np.float64) - q.z_x)
    scale, zp = tg.int8_params(self.low, self.high)
    fq = (np.clip(np.round(real / scale) + zp, -128, 127) - zp) * scale
    act = ACTIVATIONS[self.node.options.activation]
    fq = np.clip(fq, act.low, act.high)
    return np.clip(np.round(fq / q.s_y) + q.z_y, -128, 127).astype(np.int8)

  def __call__(self, x: np.ndarray, mode: str) -> np.ndarray:
    q = self.node.quant
    if mode == SOURCE:
      saved, (self.low, self.high) = (self.low, self.high), self.initial
      try:
        return self(x, FROZEN)
      finally:
        self.low, self.high = saved
    if mode == ADAPT:
      m = float(self.node.options.momentum_at(x.shape[0]))
      # s_x > 0, so the real range is the int8 range mapped affinely.
      real_min = q.s_x * (float(x.min()) - q.z_x)
      real_max = q.s_x * (float(x.max()) - q.z_x)
      self.low = (1 - m) * self.low + m * min(real_min, 0.0)
      self.high = (1 - m) * self.high + m * max(real_max, 0.0)
    # Entry i is the output for the int8 value whose bits are i, so the table
    # is indexed by the input's uint8 view.
    table = self.requantize(np.arange(256, dtype=np.uint8).view(np.int8))
    return table.take(x.view(np.uint8))


class ScaleAdapt(Int8Method):
  name = "scale-adapt"
  adaptive = True

  def __init__(self, model: SegmentedModel):
    super().__init__(model)
    self.kernels = {id(n): ScaleAdaptKernel(n) for n in model.nodes}
    model.forge_kernel = lambda node, x, mode: self.kernels[id(node)](x, mode)

  def reset(self):
    for k in self.kernels.values():
      k.reset()

  def predict(self, x_int8):
    return self.logits(x_int8, ADAPT)


INT8_METHODS = {m.name: m for m in (Source, Forge, ScaleAdapt)}
