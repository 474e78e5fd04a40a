"""How big a TFLite-Micro arena an artifact needs, from the model alone.

A firmware must fix its arena size at build time, before TFLM's planner has run on
the device. `arena_bytes` bounds it from the `.tflite` and its manifest:

  activations: TFLM's greedy plan (GreedyMemoryPlanner: buffers by decreasing size,
      each at the lowest 16-byte-aligned offset free for its whole lifetime) of every
      non-constant tensor, from the op that writes it to the last op that reads it,
      plus per op a scratch buffer alive only during that op: FORGE's own request
      (the manifest's per-site scratch) and, for convolutions, an im2col bound
      (2 columns of int16 over the kernel window, CMSIS-NN's and ESP-NN's order);
  persistent: per tensor an eval tensor, per op a node and op data with its
      per-channel requantization arrays, on 64-bit pointers (an upper bound for MCUs),
      plus FORGE's manifest figure (state, op data, node bookkeeping);
  headroom: 15%, rounded up to 1 KiB.

It is an estimate, checked against arena_used of the app on the host and Cortex-M
targets in tests/deploy (never below it, at most 1.6x it). It does not model ESP-NN's
ESP32-S3 convolution scratch (filter copies, padded input): on the MLPerf ResNet-8 the
emulated S3 app needed 16.7 KB more than it gives (esp32s3_app/esp32s3/README.md,
"Open"); pass --arena_bytes there. The app prints arena_used on every run (`mem` line),
so a user can tighten it.
"""

from __future__ import annotations

import numpy as np

from forge_tflm import tflite_graph as tg

ALIGN = 16
EVAL_TENSOR_BYTES = 24      # TfLiteEvalTensor with 64-bit pointers
NODE_BYTES = 320            # NodeAndRegistration, builtin data, op data: 64-bit, generous
HEADROOM = 0.15
_CONV_OPS = {"CONV_2D", "DEPTHWISE_CONV_2D"}


def _aligned(n: int) -> int:
  return (int(n) + ALIGN - 1) // ALIGN * ALIGN


def _tensor_bytes(t) -> int:
  shape = [max(int(d), 1) for d in (t.shape if t.shape is not None else [])]
  return int(np.prod(shape, dtype=np.int64)) * np.dtype(tg.numpy_dtype(t)).itemsize


def greedy_plan(buffers: list[tuple[int, int, int]]) -> int:
  """Peak of TFLM's greedy plan for (bytes, first_op, last_op) buffers."""
  # Stable by decreasing size: TFLM bubble-sorts the requests, which come in tensor
  # order, then the kernels' scratch requests.
  order = sorted(range(len(buffers)), key=lambda i: -_aligned(buffers[i][0]))
  placed: list[tuple[int, int, int, int]] = []  # offset, size, first, last
  peak = 0
  for i in order:
    size, first, last = buffers[i]
    size = _aligned(size)
    live = sorted((o, s) for o, s, f, l in placed if f <= last and first <= l)
    offset = 0
    for o, s in live:
      if offset + size <= o:
        break
      offset = max(offset, _aligned(o + s))
    placed.append((offset, size, first, last))
    peak = max(peak, offset + size)
  return peak


def arena_bytes(model_bytes: bytes, manifest=None) -> int:
  """A TFLM arena size (bytes, multiple of 1 KiB) that fits the model on any target."""
  model = tg.load_model(model_bytes)
  sg = model.subgraphs[0]
  n_ops = len(sg.operators)
  first: dict[int, int] = {int(i): 0 for i in sg.inputs}
  last: dict[int, int] = {int(i): n_ops - 1 for i in sg.outputs}
  persistent = EVAL_TENSOR_BYTES * len(sg.tensors)
  scratch: list[tuple[int, int, int]] = []
  forge_scratch = {s.op_index: s.memory.scratch_table for s in manifest.sites} if manifest else {}
  for k, op in enumerate(sg.operators):
    name = tg.op_name(model, op)
    for i in op.inputs:
      if i >= 0 and tg.buffer_array(model, sg.tensors[i]) is None:
        last[int(i)] = max(last.get(int(i), k), k)
        first.setdefault(int(i), k)
    for o in op.outputs:
      first.setdefault(int(o), k)
      last[int(o)] = max(last.get(int(o), k), k)
    out_channels = int(sg.tensors[op.outputs[0]].shape[-1]) if len(op.outputs) else 1
    persistent += NODE_BYTES + 8 * out_channels
    if name in _CONV_OPS:
      w = sg.tensors[op.inputs[1]].shape  # [out, kh, kw, in] / [1, kh, kw, out]
      in_ch = int(sg.tensors[op.inputs[0]].shape[-1])
      scratch.append((2 * 2 * in_ch * int(w[1]) * int(w[2]), k, k))
    if k in forge_scratch:
      scratch.append((forge_scratch[k], k, k))
  buffers = [(_tensor_bytes(sg.tensors[i]), first[i], last[i]) for i in sorted(first)]
  activations = greedy_plan(buffers + scratch)
  if manifest is not None:
    persistent += manifest.memory_json()["arena_added_bytes_32bit"] * 2  # 64-bit bound
  total = (activations + persistent) * (1 + HEADROOM)
  return int(-(-total // 1024) * 1024)
