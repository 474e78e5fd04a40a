"""Pre-activation moments of an int8 model's convs, from their exact accumulators.

The model runs in LiteRT with every tensor kept; for each conv the int32 accumulator
sum((x_q - zp_x) * w_q) is recomputed from its int8 input (float64 matmul: exact for
int8 products), plus the bias, in real units s_x * s_w[c]. That is the conv's output
before requantization and its fused activation: what a BN-folded model's BN produced.
Requantized and clamped like the kernel, it must reproduce the model's own output
within a step, which checks layout, padding and strides on every image.
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from forge_tflm.converter.calibration import RangeStats
from forge_tflm.quiet import native_output_hidden

_CHUNK = 32  # Images per accumulator batch (the im2col view stays tens of MB).


@dataclasses.dataclass(frozen=True)
class Moments:
  mean: np.ndarray       # [C] float64
  std: np.ndarray        # [C]
  range: RangeStats
  worst_steps: int       # Largest |requantized accumulator - model output|, in steps.


def _windows(x: np.ndarray, conv, out_hw: tuple[int, int]) -> np.ndarray:
  """[N, OH, OW, C, KH, KW] receptive fields of x - zp (zero padding in real units)."""
  kh, kw = conv.weights.shape[1:3]
  (sh, sw), (dh, dw) = conv.stride, conv.dilation
  x = x.astype(np.float64) - conv.input_quant[1]
  if conv.same_padding:
    pads = []
    for size, out, k, s, d in ((x.shape[1], out_hw[0], kh, sh, dh),
                               (x.shape[2], out_hw[1], kw, sw, dw)):
      total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
      pads.append((total // 2, total - total // 2))
    x = np.pad(x, ((0, 0), pads[0], pads[1], (0, 0)))
  view = sliding_window_view(x, ((kh - 1) * dh + 1, (kw - 1) * dw + 1), axis=(1, 2))
  return view[:, ::sh, ::sw, :, ::dh, ::dw][:, :out_hw[0], :out_hw[1]]


def accumulate(x: np.ndarray, conv, out_hw: tuple[int, int]) -> np.ndarray:
  """The conv's pre-activation output in real units, [N, OH, OW, O] float64."""
  win = _windows(x, conv, out_hw)
  w = conv.weights.astype(np.float64)
  if conv.kind == "conv":  # w: [O, KH, KW, I]
    acc = np.tensordot(win, w, axes=([3, 4, 5], [3, 1, 2]))
  else:  # w: [1, KH, KW, C*M]; output channel c*M + m reads input channel c.
    n, oh, ow, c = win.shape[:4]
    wd = w[0].reshape(w.shape[1], w.shape[2], c, conv.multiplier)
    acc = np.einsum("nhwckl,klcm->nhwcm", win, wd).reshape(n, oh, ow, c * conv.multiplier)
  return acc * (conv.input_quant[0] * conv.weight_scale) + conv.bias


def _requantize(real: np.ndarray, quant: tuple[float, int], activation: str) -> np.ndarray:
  scale, zp = quant
  q = np.round(real / scale) + zp
  low = zp if activation in ("relu", "relu6") else -128
  high = min(127, zp + round(6.0 / scale)) if activation == "relu6" else 127
  return np.clip(q, max(low, -128), high)


class _Sink:
  """Per-channel sums, range and a value subsample of one site, chunk by chunk."""

  def __init__(self, channels: int, total: int, keep: int, seed: int):
    self.sum = np.zeros(channels)
    self.sq = np.zeros(channels)
    self.count = 0
    self.low, self.high = np.inf, -np.inf
    self.fraction = min(1.0, keep / max(total, 1))
    self.samples: list[np.ndarray] = []
    self.rng = np.random.default_rng(seed)
    self.worst = 0

  def add(self, real: np.ndarray) -> None:
    flat = real.reshape(-1, real.shape[-1])
    self.sum += flat.sum(0)
    self.sq += np.square(flat).sum(0)
    self.count += flat.shape[0]
    self.low, self.high = min(self.low, float(flat.min())), max(self.high, float(flat.max()))
    values = real.reshape(-1)
    take = int(np.ceil(values.size * self.fraction))
    self.samples.append(values if take >= values.size else
                        self.rng.choice(values, take, replace=False))

  def moments(self) -> Moments:
    mean = self.sum / self.count
    var = np.maximum(self.sq / self.count - np.square(mean), 0.0)
    values = np.concatenate(self.samples).astype(np.float32)
    return Moments(mean, np.sqrt(var), RangeStats(self.low, self.high, self.count, values),
                   self.worst)


def measure(model: bytes, convs: list, x_int8: np.ndarray, keep: int,
            seed: int = 0) -> list[Moments]:
  """Moments of each conv in `convs` (frontend_tflite._Conv) over the int8 inputs."""
  from ai_edge_litert.interpreter import Interpreter

  with native_output_hidden(), warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)  # "preserve_all_tensors is for debugging"
    it = Interpreter(model_content=model, experimental_preserve_all_tensors=True)
    it.allocate_tensors()
  input_index = it.get_input_details()[0]["index"]
  details = {d["index"]: d for d in it.get_tensor_details()}
  shapes = {c.index: tuple(details[c.output]["shape"]) for c in convs}
  sinks = [_Sink(shapes[c.index][-1], len(x_int8) * int(np.prod(shapes[c.index][1:])),
                 keep, seed + k) for k, c in enumerate(convs)]
  for start in range(0, len(x_int8), _CHUNK):
    chunk = x_int8[start:start + _CHUNK]
    ins = {c.index: [] for c in convs}
    outs = {c.index: [] for c in convs}
    for image in chunk:
      it.set_tensor(input_index, image[None])
      it.invoke()
      for c in convs:
        ins[c.index].append(it.get_tensor(c.input))
        outs[c.index].append(it.get_tensor(c.output))
    for c, sink in zip(convs, sinks):
      real = accumulate(np.concatenate(ins[c.index]), c, shapes[c.index][1:3])
      got = np.concatenate(outs[c.index]).astype(np.int64)
      want = _requantize(real, c.output_quant, c.activation)
      sink.worst = max(sink.worst, int(np.abs(want - got).max()))
      sink.add(real)
  return [s.moments() for s in sinks]
