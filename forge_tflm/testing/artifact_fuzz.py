"""Mutation fuzz of FORGE artifacts through the evaluator's loading path (issue 20).

The path `forge_tflm eval` takes with an artifact: `Artifact.load` (model validation,
manifest), `SegmentedModel.from_artifact` (segmentation, one LiteRT interpreter per
segment, FORGE nodes prepared in the C core) and one inference. Each mutant runs in a
child forked from a worker that has imported everything once (a fork server), under
an alarm and an address-space limit, so that an abort, a segfault, a hang or runaway
memory is attributed to exactly one mutant, which is written out for reproduction.

Two small hand-made full-int8 seed artifacts (8x8x3 input, 8 channels), each with
its manifest: "device" (3 mutants in 4) has every operator the device application
registers (CONV_2D, FORGE_RECALIB, DEPTHWISE_CONV_2D, ADD, AVERAGE_POOL_2D, MEAN,
RESHAPE, FULLY_CONNECTED, SOFTMAX), "extra" the validator's other builtins (PAD,
MAX_POOL_2D, RELU6, CONCATENATION, MUL, SUB, RELU) around a FORGE node. Mutants
(deterministic in (run seed, index)):
  field      one to three structured mutations through the flatbuffer object API:
             shapes, types, buffer indices and data, quantization scales, zero points
             and per-channel arrays, operator inputs/outputs (-2, -1, out of range,
             another tensor), opcode indices and builtin codes, builtin options
             (strides, padding, filters, activations, axes, beta, ...), FORGE options,
             beta/gamma values, model inputs/outputs, operator order;
  word       one aligned 32-bit word of the file set to an interesting value;
  bits       1-8 bit flips; bytes: 1-4 bytes set; trunc: truncation.
Half of the mutants carry a manifest rewritten to match the mutated bytes (so the
manifest's checks pass and the model's are exercised), the rest have none; a quarter
run with kernels="optimized", the rest "reference".

Outcomes: ok (ran), rejected (a one-line ValueError: by the validator, or by LiteRT
through the segment wrapper), error (any other exception, or a multi-line message),
crash (killed by a signal or a non-zero exit), hang (past the time limit).

  python -m forge_tflm.testing.artifact_fuzz --mutants=2000 --workers=2   # summary JSON
  python -m forge_tflm.testing.artifact_fuzz --load FILE.tflite ...          # reproduce
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import copy
import json
import os
import resource
import signal
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np
from ai_edge_litert import schema_py_generated as schema

from forge_tflm import tflite_graph as tg

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TIME_LIMIT_S = 20          # Per mutant; a normal one takes < 0.1 s.
MEMORY_LIMIT_BYTES = 3 << 30  # Address space a mutant may add to the fork server.
OUTCOMES = ("ok", "rejected", "error", "crash", "hang")
FAILURES = ("error", "crash", "hang")
MUTATORS = ("field", "word", "bits", "bytes", "trunc")

T = schema.TensorType
BO = schema.BuiltinOperator
O = schema.BuiltinOptions


# -- the seed artifact ---------------------------------------------------------------


def _quant(scale, zero_point=0, axis=0):
  q = schema.QuantizationParametersT()
  q.scale = [float(s) for s in np.atleast_1d(scale)]
  q.zeroPoint = [int(z) for z in np.broadcast_to(zero_point, len(q.scale))]
  q.quantizedDimension = axis
  return q


class _Builder:
  def __init__(self):
    self.model = schema.ModelT()
    self.model.version, self.model.buffers, self.model.operatorCodes = 3, [schema.BufferT()], []
    self.model.description = "forge_tflm fuzz seed"
    self.sg = schema.SubGraphT()
    self.sg.tensors, self.sg.operators, self.sg.name = [], [], "main"
    self.codes = {}

  def tensor(self, name, shape, ttype, quant=None, data=None) -> int:
    t = schema.TensorT()
    t.name, t.shape, t.type, t.quantization = name, list(shape), ttype, quant
    t.buffer = 0 if data is None else tg.add_const_buffer(self.model, np.asarray(data))
    self.sg.tensors.append(t)
    return len(self.sg.tensors) - 1

  def op(self, code, inputs, outputs, options_type=O.NONE, options=None, custom=None):
    if code not in self.codes:
      if isinstance(code, str):
        self.codes[code] = tg.custom_opcode_index(self.model, code)
      else:
        oc = schema.OperatorCodeT()
        oc.builtinCode, oc.deprecatedBuiltinCode, oc.version = code, code, 1
        self.model.operatorCodes.append(oc)
        self.codes[code] = len(self.model.operatorCodes) - 1
    op = schema.OperatorT()
    op.opcodeIndex, op.inputs, op.outputs = self.codes[code], list(inputs), list(outputs)
    op.builtinOptionsType, op.builtinOptions = options_type, options
    if custom is not None:
      op.customOptions = list(custom)
      op.customOptionsFormat = schema.CustomOptionsFormat.FLEXBUFFERS
    self.sg.operators.append(op)


def _conv_options(cls, padding, stride, act, **extra):
  o = cls()
  o.padding, o.strideW, o.strideH, o.fusedActivationFunction = padding, stride, stride, act
  o.dilationWFactor = o.dilationHFactor = 1
  for k, v in extra.items():
    setattr(o, k, v)
  return o


def seed_model(size: int = 8, channels: int = 8, classes: int = 10,
               seed: int = 0) -> bytes:
  """A small full-int8 FORGE artifact using every operator the device registers."""
  from forge_tflm.ops import RecalibOptions, encode_options

  rng = np.random.default_rng(seed)
  b = _Builder()
  c, relu = channels, schema.ActivationFunctionType.RELU
  s_in, s_a, s_b, s_c = 1 / 255, 0.05, 0.03, 0.04
  x = b.tensor("image", [1, size, size, 3], T.INT8, _quant(s_in, -128))
  # CONV_2D 3x3 SAME, per-channel weights -> pre-activation t0.
  w0_scale = rng.uniform(0.002, 0.01, c)
  w0 = b.tensor("conv0/w", [c, 3, 3, 3], T.INT8, _quant(w0_scale),
                rng.integers(-127, 128, (c, 3, 3, 3)).astype(np.int8))
  b0 = b.tensor("conv0/b", [c], T.INT32, _quant(s_in * w0_scale),
                rng.integers(-500, 500, c).astype(np.int32))
  t0 = b.tensor("conv0", [1, size, size, c], T.INT8, _quant(s_a, 0))
  b.op(BO.CONV_2D, [x, w0, b0], [t0], O.Conv2DOptions,
       _conv_options(schema.Conv2DOptionsT, schema.Padding.SAME, 1,
                     schema.ActivationFunctionType.NONE))
  # FORGE_RECALIB (relu) -> t1, read by the depthwise conv and the ADD.
  beta = b.tensor("bn0/beta", [c], T.FLOAT32, data=rng.normal(0, 0.5, c).astype(np.float32))
  gamma = b.tensor("bn0/gamma_abs", [c], T.FLOAT32,
                   data=rng.uniform(0.5, 2.0, c).astype(np.float32))
  t1 = b.tensor("bn0", [1, size, size, c], T.INT8, _quant(s_b, -128))
  b.op("FORGE_RECALIB", [t0, beta, gamma], [t1],
       custom=encode_options(RecalibOptions(momentum=0.1, activation="relu")))
  # DEPTHWISE_CONV_2D 3x3 (relu), per-channel along dimension 3.
  w1_scale = rng.uniform(0.002, 0.01, c)
  w1 = b.tensor("dw/w", [1, 3, 3, c], T.INT8, _quant(w1_scale, 0, 3),
                rng.integers(-127, 128, (1, 3, 3, c)).astype(np.int8))
  b1 = b.tensor("dw/b", [c], T.INT32, _quant(s_b * w1_scale),
                rng.integers(-500, 500, c).astype(np.int32))
  t2 = b.tensor("dw", [1, size, size, c], T.INT8, _quant(s_b, -128))
  b.op(BO.DEPTHWISE_CONV_2D, [t1, w1, b1], [t2], O.DepthwiseConv2DOptions,
       _conv_options(schema.DepthwiseConv2DOptionsT, schema.Padding.SAME, 1, relu,
                     depthMultiplier=1))
  # ADD (relu) of the two.
  t3 = b.tensor("add", [1, size, size, c], T.INT8, _quant(s_c, -128))
  add = schema.AddOptionsT()
  add.fusedActivationFunction = relu
  b.op(BO.ADD, [t1, t2], [t3], O.AddOptions, add)
  # AVERAGE_POOL_2D 2x2 stride 2 VALID.
  half = size // 2
  t4 = b.tensor("pool", [1, half, half, c], T.INT8, _quant(s_c, -128))
  pool = schema.Pool2DOptionsT()
  pool.padding, pool.strideW, pool.strideH = schema.Padding.VALID, 2, 2
  pool.filterWidth = pool.filterHeight = 2
  b.op(BO.AVERAGE_POOL_2D, [t3], [t4], O.Pool2DOptions, pool)
  # MEAN over H, W.
  axes = b.tensor("mean/axes", [2], T.INT32, data=np.array([1, 2], np.int32))
  t5 = b.tensor("mean", [1, c], T.INT8, _quant(0.02, -128))
  red = schema.ReducerOptionsT()
  red.keepDims = False
  b.op(BO.MEAN, [t4, axes], [t5], O.ReducerOptions, red)
  # RESHAPE to [1, C] (shape input).
  shape = b.tensor("reshape/shape", [2], T.INT32, data=np.array([-1, c], np.int32))
  t6 = b.tensor("flat", [1, c], T.INT8, _quant(0.02, -128))
  b.op(BO.RESHAPE, [t5, shape], [t6], O.ReshapeOptions, schema.ReshapeOptionsT())
  # FULLY_CONNECTED with per-channel weights.
  w7_scale = rng.uniform(0.005, 0.02, classes)
  w7 = b.tensor("fc/w", [classes, c], T.INT8, _quant(w7_scale),
                rng.integers(-127, 128, (classes, c)).astype(np.int8))
  b7 = b.tensor("fc/b", [classes], T.INT32, _quant(0.02 * w7_scale),
                rng.integers(-200, 200, classes).astype(np.int32))
  t7 = b.tensor("logits", [1, classes], T.INT8, _quant(0.1, 0))
  fc = schema.FullyConnectedOptionsT()
  b.op(BO.FULLY_CONNECTED, [t6, w7, b7], [t7], O.FullyConnectedOptions, fc)
  # SOFTMAX.
  t8 = b.tensor("probs", [1, classes], T.INT8, _quant(1 / 256, -128))
  sm = schema.SoftmaxOptionsT()
  sm.beta = 1.0
  b.op(BO.SOFTMAX, [t7], [t8], O.SoftmaxOptions, sm)
  b.sg.inputs, b.sg.outputs = [x], [t8]
  b.model.subgraphs = [b.sg]
  return tg.save_model(b.model)


def seed_model_extra(size: int = 8, channels: int = 8, classes: int = 10,
                     seed: int = 1) -> bytes:
  """The other builtins the validator supports around a FORGE node: PAD, CONV_2D,
  FORGE_RECALIB, MAX_POOL_2D, RELU6, CONCATENATION, MUL, SUB, RELU, MEAN,
  FULLY_CONNECTED (per-tensor weights)."""
  from forge_tflm.ops import RecalibOptions, encode_options

  rng = np.random.default_rng(seed)
  b = _Builder()
  c, s_in = channels, 1 / 255
  x = b.tensor("image", [1, size, size, 3], T.INT8, _quant(s_in, -128))
  pads = b.tensor("pad/paddings", [4, 2], T.INT32,
                  data=np.array([[0, 0], [1, 1], [1, 1], [0, 0]], np.int32))
  xp = b.tensor("pad", [1, size + 2, size + 2, 3], T.INT8, _quant(s_in, -128))
  b.op(BO.PAD, [x, pads], [xp], O.PadOptions, schema.PadOptionsT())
  w_scale = rng.uniform(0.002, 0.01, c)
  w = b.tensor("conv/w", [c, 3, 3, 3], T.INT8, _quant(w_scale),
               rng.integers(-127, 128, (c, 3, 3, 3)).astype(np.int8))
  bias = b.tensor("conv/b", [c], T.INT32, _quant(s_in * w_scale),
                  rng.integers(-500, 500, c).astype(np.int32))
  t0 = b.tensor("conv", [1, size, size, c], T.INT8, _quant(0.05, 0))
  b.op(BO.CONV_2D, [xp, w, bias], [t0], O.Conv2DOptions,
       _conv_options(schema.Conv2DOptionsT, schema.Padding.VALID, 1,
                     schema.ActivationFunctionType.NONE))
  beta = b.tensor("bn/beta", [c], T.FLOAT32, data=rng.normal(0, 0.5, c).astype(np.float32))
  gamma = b.tensor("bn/gamma_abs", [c], T.FLOAT32,
                   data=rng.uniform(0.5, 2.0, c).astype(np.float32))
  t1 = b.tensor("bn", [1, size, size, c], T.INT8, _quant(0.03, 0))
  b.op("FORGE_RECALIB", [t0, beta, gamma], [t1],
       custom=encode_options(RecalibOptions(window=16, activation="none",
                                            variance="batch")))
  half = size // 2
  t2 = b.tensor("maxpool", [1, half, half, c], T.INT8, _quant(0.03, 0))
  pool = schema.Pool2DOptionsT()
  pool.padding, pool.strideW, pool.strideH = schema.Padding.SAME, 2, 2
  pool.filterWidth = pool.filterHeight = 3
  b.op(BO.MAX_POOL_2D, [t1], [t2], O.Pool2DOptions, pool)
  t3 = b.tensor("relu6", [1, half, half, c], T.INT8, _quant(0.03, 0))
  b.op(BO.RELU6, [t2], [t3])
  t4 = b.tensor("concat", [1, half, half, 2 * c], T.INT8, _quant(0.03, 0))
  cat = schema.ConcatenationOptionsT()
  cat.axis = 3
  b.op(BO.CONCATENATION, [t2, t3], [t4], O.ConcatenationOptions, cat)
  k = b.tensor("mul/k", [2 * c], T.INT8, _quant(0.01, 0),
               rng.integers(-127, 128, 2 * c).astype(np.int8))
  t5 = b.tensor("mul", [1, half, half, 2 * c], T.INT8, _quant(0.02, 0))
  b.op(BO.MUL, [t4, k], [t5], O.MulOptions, schema.MulOptionsT())
  t6 = b.tensor("sub", [1, half, half, 2 * c], T.INT8, _quant(0.04, 0))
  b.op(BO.SUB, [t5, t4], [t6], O.SubOptions, schema.SubOptionsT())
  t7 = b.tensor("relu", [1, half, half, 2 * c], T.INT8, _quant(0.04, -128))
  b.op(BO.RELU, [t6], [t7])
  axes = b.tensor("mean/axes", [2], T.INT32, data=np.array([1, 2], np.int32))
  t8 = b.tensor("mean", [1, 2 * c], T.INT8, _quant(0.02, -128))
  red = schema.ReducerOptionsT()
  b.op(BO.MEAN, [t7, axes], [t8], O.ReducerOptions, red)
  wf = b.tensor("fc/w", [classes, 2 * c], T.INT8, _quant(0.01),
                rng.integers(-127, 128, (classes, 2 * c)).astype(np.int8))
  bf = b.tensor("fc/b", [classes], T.INT32, _quant(0.02 * 0.01),
                rng.integers(-200, 200, classes).astype(np.int32))
  t9 = b.tensor("logits", [1, classes], T.INT8, _quant(0.1, 0))
  b.op(BO.FULLY_CONNECTED, [t8, wf, bf], [t9], O.FullyConnectedOptions,
       schema.FullyConnectedOptionsT())
  b.sg.inputs, b.sg.outputs = [x], [t9]
  b.model.subgraphs = [b.sg]
  return tg.save_model(b.model)


SEEDS = {"device": seed_model, "extra": seed_model_extra}


def seed_manifest(model: bytes) -> dict:
  """The manifest `convert` would write for the seed (one FORGE site), as JSON."""
  import hashlib

  from forge_tflm.artifact import InputContract, Manifest, SiteRecord, TensorQuant
  from forge_tflm.ops import decode_options

  m = tg.load_model(model)
  sg = m.subgraphs[0]
  sites = []
  for i, op in enumerate(sg.operators):
    if tg.op_name(m, op) == tg.FORGE_RECALIB:
      x, y = sg.tensors[op.inputs[0]], sg.tensors[op.outputs[0]]
      sites.append(SiteRecord(
          name=f"bn@{i}", conv=f"conv@{i - 1}", kind="conv", op_index=i,
          channels=int(x.shape[-1]), bn_eps=1e-5,
          options=decode_options(bytes(np.asarray(op.customOptions, np.uint8))),
          input_tensor=tg.tensor_name(x), output_tensor=tg.tensor_name(y),
          input_quant=TensorQuant(*tg.per_tensor_quant(x)),
          output_quant=TensorQuant(*tg.per_tensor_quant(y)),
          preact_saturated_fraction=0.0))
  x, y = sg.tensors[sg.inputs[0]], sg.tensors[sg.outputs[0]]
  return Manifest(
      model_sha256=hashlib.sha256(model).hexdigest(), model_bytes=len(model),
      source={"path": "fuzz_seed", "sha256": "", "frontend": "handmade"},
      command="forge_tflm/testing/artifact_fuzz.py", input_contract=InputContract(),
      input_quant=TensorQuant(*tg.per_tensor_quant(x)),
      output_quant=TensorQuant(*tg.per_tensor_quant(y)), calibration={},
      bn_sites_found=tuple(s.name for s in sites), sites=tuple(sites)).to_json()


# -- mutations ----------------------------------------------------------------------

_INTERESTING_INTS = [-(1 << 31), -65536, -129, -128, -3, -2, -1, 0, 1, 2, 3, 4, 7, 8,
                     15, 16, 31, 32, 64, 127, 128, 255, 256, 1023, 4096, 65535, 65536,
                     1 << 20, 1 << 24, (1 << 31) - 1]
_INTERESTING_FLOATS = [0.0, -0.0, -1.0, 1e-45, 1e-38, 1e-30, 1e-20, 1e-12, 2.0**-41,
                       2.0**-40, 1e-6, 1 / 256, 0.5, 1.0, 2.0, 255.0, 1e6, 2.0**40,
                       2.0**41, 1e20, 1e30, 3.4e38, float("inf"), float("-inf"),
                       float("nan")]


def _pick(rng, values):
  return values[int(rng.integers(len(values)))]


def _int(rng, n=None) -> int:
  """An interesting int, or a small/valid one (an index below n) half the time."""
  if n is not None and rng.random() < 0.5:
    return int(rng.integers(-2, n + 2))
  return int(_pick(rng, _INTERESTING_INTS))


def _float(rng) -> float:
  if rng.random() < 0.3:
    return float(10.0 ** rng.uniform(-45, 39)) * (1 if rng.random() < 0.9 else -1)
  return float(_pick(rng, _INTERESTING_FLOATS))


def _mutate_options(rng, options) -> str:
  fields = [k for k, v in vars(options).items() if isinstance(v, (bool, int, float))
            or v is None or isinstance(v, (list, np.ndarray))]
  if not fields:
    return "options: none"
  f = _pick(rng, fields)
  old = getattr(options, f)
  if isinstance(old, float):
    new = _float(rng)
  elif isinstance(old, (list, np.ndarray)) or old is None:
    new = [_int(rng, 16) for _ in range(int(rng.integers(0, 5)))]
  elif isinstance(old, bool):
    new = not old
  else:
    new = _int(rng, 8)
  setattr(options, f, new)
  return f"options.{f}={new!r}"


def _field_mutation(rng, model) -> str:
  """One structured mutation of `model` (object API) in place; its description."""
  from forge_tflm.ops import RecalibOptions, encode_options

  sg = model.subgraphs[0]
  n_t, n_op = len(sg.tensors), len(sg.operators)
  kind = _pick(rng, ["shape", "shape", "type", "buffer", "scale", "scale", "zero_point",
                     "quant_len", "quant_dim", "op_input", "op_input", "op_output",
                     "opcode_index", "builtin_code", "options", "options", "forge_options",
                     "buffer_data", "target_values", "graph_io", "op_order",
                     "drop_op", "shape_signature", "custom_code"])
  t = sg.tensors[int(rng.integers(n_t))]
  ti = sg.tensors.index(t)
  op = sg.operators[int(rng.integers(n_op))]
  oi = sg.operators.index(op)
  if kind == "shape":
    shape = [int(d) for d in t.shape]
    r = rng.random()
    if r < 0.15 and shape:
      shape.pop(int(rng.integers(len(shape))))
    elif r < 0.25:
      shape.insert(int(rng.integers(len(shape) + 1)), _int(rng, 4))
    elif shape:
      k = int(rng.integers(len(shape)))
      shape[k] = _pick(rng, [_int(rng), shape[k] + 1, shape[k] * 2, shape[k] - 1,
                             int(rng.integers(1, 1 << 16)), 100000, 1 << 30])
    t.shape = shape
    return f"tensor {ti} shape={shape}"
  if kind == "type":
    t.type = _pick(rng, [T.INT8, T.UINT8, T.INT16, T.INT32, T.INT64, T.FLOAT32, T.BOOL,
                         T.FLOAT16, T.STRING, int(rng.integers(0, 30))])
    return f"tensor {ti} type={t.type}"
  if kind == "buffer":
    t.buffer = _int(rng, len(model.buffers))
    return f"tensor {ti} buffer={t.buffer}"
  if kind in ("scale", "zero_point", "quant_len", "quant_dim"):
    q = t.quantization or schema.QuantizationParametersT()
    t.quantization = q
    scale = [] if q.scale is None else [float(s) for s in q.scale]
    zero = [] if q.zeroPoint is None else [int(z) for z in q.zeroPoint]
    if kind == "scale":
      if not scale:
        scale, zero = [_float(rng)], [0]
      else:
        scale[int(rng.integers(len(scale)))] = _float(rng)
    elif kind == "zero_point":
      if not zero:
        scale, zero = [0.1], [_int(rng)]
      else:
        zero[int(rng.integers(len(zero)))] = _int(rng)
    elif kind == "quant_len":
      k = int(rng.integers(0, 4))
      r = rng.random()
      if r < 0.4:
        scale = scale[:k]
      elif r < 0.7:
        zero = zero[:k]
      else:
        scale, zero = scale + [0.1] * k, zero + [0] * k
    else:
      q.quantizedDimension = _int(rng, 4)
    q.scale, q.zeroPoint = scale, zero
    return f"tensor {ti} {kind}: scale={scale[:4]} zp={zero[:4]} dim={q.quantizedDimension}"
  if kind == "op_input":
    ins = [int(i) for i in op.inputs]
    r = rng.random()
    if r < 0.2:
      ins.append(_int(rng, n_t))
    elif r < 0.3 and ins:
      ins.pop()
    elif ins:
      ins[int(rng.integers(len(ins)))] = _pick(rng, [-2, -1, n_t, _int(rng, n_t),
                                                     int(rng.integers(n_t))])
    op.inputs = ins
    return f"op {oi} inputs={ins}"
  if kind == "op_output":
    outs = [int(i) for i in op.outputs]
    if rng.random() < 0.2:
      outs.append(int(rng.integers(n_t)))
    else:
      outs[0] = _pick(rng, [-2, -1, n_t, _int(rng, n_t), int(rng.integers(n_t))])
    op.outputs = outs
    return f"op {oi} outputs={outs}"
  if kind == "opcode_index":
    op.opcodeIndex = _int(rng, len(model.operatorCodes))
    return f"op {oi} opcode_index={op.opcodeIndex}"
  if kind == "builtin_code":
    code = model.operatorCodes[int(rng.integers(len(model.operatorCodes)))]
    from forge_tflm.model_check import SUPPORTED_BUILTINS
    names = list(SUPPORTED_BUILTINS)
    new = (getattr(BO, _pick(rng, names)) if rng.random() < 0.7
           else int(rng.integers(0, 210)))
    code.builtinCode = code.deprecatedBuiltinCode = new
    code.deprecatedBuiltinCode = min(new, 127)
    return f"opcode builtin={new}"
  if kind == "options":
    if op.builtinOptions is None or rng.random() < 0.1:
      op.builtinOptionsType = int(rng.integers(0, 128))
      return f"op {oi} options_type={op.builtinOptionsType}"
    return f"op {oi} " + _mutate_options(rng, op.builtinOptions)
  if kind == "forge_options":
    forge = [o for o in sg.operators if o.customOptions is not None]
    if not forge:
      return "no forge op"
    o = forge[0]
    r = rng.random()
    if r < 0.4:
      kw = {}
      if rng.random() < 0.5:
        kw["momentum"] = _float(rng)
      else:
        kw["window"] = _int(rng)
      kw["eps"] = _float(rng) if rng.random() < 0.5 else 1e-5
      kw["activation"] = _pick(rng, ["none", "relu", "relu6"])
      try:
        o.customOptions = list(encode_options(RecalibOptions(**kw)))
      except ValueError:
        o.customOptions = list(encode_options(RecalibOptions(momentum=0.1)))[:-2]
      return f"forge options {kw}"
    data = bytearray(bytes(np.asarray(o.customOptions, np.uint8)))
    if r < 0.7 and data:
      data[int(rng.integers(len(data)))] = int(rng.integers(256))
    else:
      data = data[:int(rng.integers(len(data) + 1))]
    o.customOptions = list(data)
    return f"forge options bytes mutated ({len(data)} bytes)"
  if kind == "buffer_data":
    i = int(rng.integers(len(model.buffers)))
    buf = model.buffers[i]
    data = bytearray(b"" if buf.data is None else bytes(np.asarray(buf.data, np.uint8)))
    r = rng.random()
    if r < 0.4:
      data = data[:int(rng.integers(len(data) + 1))]
    elif r < 0.7:
      data += bytes(int(rng.integers(1, 64)))
    elif data:
      for _ in range(int(rng.integers(1, 8))):
        data[int(rng.integers(len(data)))] = int(rng.integers(256))
    buf.data = np.frombuffer(bytes(data), np.uint8)
    return f"buffer {i} data ({len(data)} bytes)"
  if kind == "target_values":
    floats = [k for k, tt in enumerate(sg.tensors) if tt.type == T.FLOAT32 and tt.buffer]
    k = _pick(rng, floats)
    buf = model.buffers[sg.tensors[k].buffer]
    arr = np.frombuffer(bytes(np.asarray(buf.data, np.uint8)), np.float32).copy()
    arr[int(rng.integers(len(arr)))] = _float(rng)
    buf.data = np.frombuffer(arr.tobytes(), np.uint8)
    return f"tensor {k} value mutated"
  if kind == "graph_io":
    if rng.random() < 0.5:
      sg.inputs = [_int(rng, n_t)] if rng.random() < 0.8 else []
      return f"graph inputs={list(sg.inputs)}"
    sg.outputs = [_int(rng, n_t)] + ([int(rng.integers(n_t))] if rng.random() < 0.2 else [])
    return f"graph outputs={list(sg.outputs)}"
  if kind == "op_order":
    j = int(rng.integers(n_op))
    sg.operators[oi], sg.operators[j] = sg.operators[j], sg.operators[oi]
    return f"ops {oi}<->{j}"
  if kind == "drop_op":
    if rng.random() < 0.5:
      del sg.operators[oi]
      return f"op {oi} dropped"
    sg.operators.insert(oi, copy.deepcopy(op))
    return f"op {oi} duplicated"
  if kind == "shape_signature":
    t.shapeSignature = [_int(rng, 8) for _ in range(int(rng.integers(0, 5)))]
    return f"tensor {ti} shape_signature={t.shapeSignature}"
  code = model.operatorCodes[int(rng.integers(len(model.operatorCodes)))]
  code.builtinCode = code.deprecatedBuiltinCode = BO.CUSTOM
  code.customCode = _pick(rng, ["FORGE_RECALIB", "TEST_X", "", "\x00\n"])
  return f"opcode custom={code.customCode!r}"


def seed_for(index: int, run_seed: int = 0) -> str:
  """Which seed mutant `index` starts from: "device" 3 times in 4, else "extra"."""
  return "extra" if np.random.default_rng([run_seed, index, 2]).random() < 0.25 \
      else "device"


def mutate(seed: bytes, index: int, run_seed: int = 0) -> tuple[bytes, str, str]:
  """(mutant bytes, mutator, description) of `seed` for mutant `index`;
  deterministic."""
  rng = np.random.default_rng([run_seed, index])
  kind = MUTATORS[int(rng.choice(len(MUTATORS), p=[0.55, 0.15, 0.15, 0.08, 0.07]))]
  data = bytearray(seed)
  if kind == "field":
    count = 1 + int(rng.random() < 0.15) + int(rng.random() < 0.05)
    for _ in range(20):  # A value the field's type cannot hold: draw another.
      model = tg.load_model(seed)
      descs = []
      try:
        for _ in range(count):
          descs.append(_field_mutation(rng, model))
        return tg.save_model(model), kind, "; ".join(descs)
      except (TypeError, ValueError, OverflowError, IndexError, struct.error):
        continue
    return bytes(seed), kind, "no packable mutation"
  if kind == "word":
    at = 4 * int(rng.integers(len(data) // 4))
    value = _int(rng, 64) if rng.random() < 0.8 else int(rng.integers(-(1 << 31), 1 << 31))
    data[at:at + 4] = int(value).to_bytes(4, "little", signed=True)
    return bytes(data), kind, f"word @{at} = {value}"
  if kind == "bits":
    flips = [int(rng.integers(len(data) * 8)) for _ in range(int(rng.integers(1, 9)))]
    for bit in flips:
      data[bit // 8] ^= 1 << (bit % 8)
    return bytes(data), kind, f"bits {flips}"
  if kind == "bytes":
    where = []
    for _ in range(int(rng.integers(1, 5))):
      at = int(rng.integers(len(data)))
      data[at] = _pick(rng, [0, 1, 0x7F, 0x80, 0xFE, 0xFF, int(rng.integers(256))])
      where.append(at)
    return bytes(data), kind, f"bytes {where}"
  cut = int(rng.integers(len(data)))
  return bytes(data[:cut]), kind, f"truncated to {cut} bytes"


# -- running one mutant (in the forked child) ------------------------------------------


def load_and_run(path: str, kernels: str) -> tuple[str, str]:
  """The evaluator's loading path on `path` plus one batch-1 inference."""
  from forge_tflm.artifact import Artifact
  from forge_tflm.model_check import ModelCheckError
  from forge_tflm.runtime.segmented import SegmentedModel

  try:
    artifact = Artifact.load(path)
    model = SegmentedModel.from_artifact(artifact, kernels)
    x = np.random.default_rng(0).integers(-128, 128, (1,) + model.input_shape
                                          ).astype(np.int8)
    y = model.run(x)
    model.dequantize_output(y)
  except (ValueError, OSError) as e:  # What the CLI prints as one line.
    msg = str(e)
    if "\n" in msg or not msg:
      return "error", f"multi-line or empty {type(e).__name__}: {msg!r}"[:500]
    origin = ("validator" if isinstance(e, ModelCheckError)
              else "manifest" if "manifest contradicts the model" in msg
              else "litert" if ": LiteRT " in msg else "other")
    return "rejected", f"[{origin}] {msg}"[:500]
  except Exception as e:  # noqa: BLE001 - any other exception is a finding.
    return "error", f"{type(e).__name__}: {e}"[:500]
  return "ok", ""


def _child(action, fd: int, log: str) -> None:
  # Nothing the libraries print may reach the worker's record stream (stdout);
  # stderr (an abort's message) goes to a file kept with a finding.
  devnull = os.open(os.devnull, os.O_WRONLY)
  os.dup2(devnull, 1)
  err = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
  os.dup2(err, 2)
  signal.signal(signal.SIGALRM, signal.SIG_DFL)  # A hang in C++ is killed, too.
  signal.alarm(TIME_LIMIT_S)
  soft, hard = resource.getrlimit(resource.RLIMIT_AS)
  limit = _vm_size() + MEMORY_LIMIT_BYTES
  if hard == resource.RLIM_INFINITY or hard > limit:
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
  outcome, msg = action()
  os.write(fd, json.dumps([outcome, msg]).encode())
  os.close(fd)
  os._exit(0)


def _vm_size() -> int:
  with open("/proc/self/status") as f:
    for line in f:
      if line.startswith("VmSize:"):
        return int(line.split()[1]) * 1024
  return 0


def run_isolated(path: str, kernels: str, workdir: str) -> dict:
  """Runs load_and_run(path, kernels) in a forked child (run_action)."""
  return run_action(lambda: load_and_run(path, kernels), workdir)


def run_action(action, workdir: str) -> dict:
  """Runs action() -> (outcome, message) in a forked child under the time and memory
  limits; {"outcome", "message", "seconds"} with the crash or hang, if any,
  attributed to this one call."""
  r, w = os.pipe()
  t0 = time.monotonic()
  pid = os.fork()
  if pid == 0:
    os.close(r)
    try:
      _child(action, w, os.path.join(workdir, "stderr.txt"))
    finally:
      os._exit(70)
  os.close(w)
  chunks = []
  while True:
    chunk = os.read(r, 65536)
    if not chunk:
      break
    chunks.append(chunk)
  os.close(r)
  _, status = os.waitpid(pid, 0)
  record = {"seconds": round(time.monotonic() - t0, 3)}
  if os.WIFSIGNALED(status):
    sig = os.WTERMSIG(status)
    record["outcome"] = "hang" if sig == signal.SIGALRM else "crash"
    record["message"] = f"killed by {signal.Signals(sig).name}"
  elif os.WEXITSTATUS(status) != 0 or not chunks:
    record["outcome"] = "crash"
    record["message"] = f"exit status {os.WEXITSTATUS(status)}"
  else:
    record["outcome"], record["message"] = json.loads(b"".join(chunks))
  if record["outcome"] in FAILURES:
    try:
      with open(os.path.join(workdir, "stderr.txt"), errors="replace") as f:
        record["stderr"] = f.read()[-2000:]
    except OSError:
      pass
  return record


def mutant_manifest(data: bytes, manifest: dict, mutator: str) -> dict:
  """The manifest for a mutant: for a field mutant (re-serialized by the object API,
  so safe to parse here) the one `convert` would write for it, so that the manifest's
  checks against the model (issue 34) pass and the model's are exercised; otherwise,
  or where it has none, the seed's with the mutant's hash."""
  import hashlib

  if mutator == "field":
    try:
      return seed_manifest(data)
    except Exception:  # noqa: BLE001 - a mutant convert could not describe.
      pass
  return dict(manifest, model_sha256=hashlib.sha256(data).hexdigest(),
              model_bytes=len(data))


def run_mutant(seeds: dict, index: int, run_seed: int, workdir: str) -> dict:
  """Writes mutant `index` (and maybe its manifest) and runs it isolated; seeds:
  name -> (model bytes, manifest JSON)."""
  import hashlib

  seed_name = seed_for(index, run_seed)
  seed, manifest = seeds[seed_name]
  data, mutator, desc = mutate(seed, index, run_seed)
  rng = np.random.default_rng([run_seed, index, 1])
  kernels = "optimized" if rng.random() < 0.25 else "reference"
  path = os.path.join(workdir, "mutant.tflite")
  mpath = os.path.join(workdir, "mutant.json")
  with open(path, "wb") as f:
    f.write(data)
  with_manifest = rng.random() < 0.5
  if with_manifest:
    doc = mutant_manifest(data, manifest, mutator)
    with open(mpath, "w") as f:
      json.dump(doc, f)
  elif os.path.exists(mpath):
    os.remove(mpath)
  record = {"index": index, "seed": seed_name, "mutator": mutator, "desc": desc,
            "kernels": kernels, "manifest": with_manifest}
  record.update(run_isolated(path, kernels, workdir))
  if record["outcome"] in FAILURES:  # Kept for reproduction.
    keep = os.path.join(workdir, f"finding_{index}.tflite")
    os.replace(path, keep)
    record["file"] = keep
  return record


def worker(run_seed: int, indices: range, workdir: str, out) -> None:
  """Fork server: imports and warms up once, then one forked child per mutant."""
  from forge_tflm.artifact import Artifact  # noqa: F401 - preloaded for the children.
  from forge_tflm.runtime.segmented import SegmentedModel

  seeds = {}
  for name, build in SEEDS.items():
    seed = build()
    seeds[name] = (seed, seed_manifest(seed))
    for kernels in ("reference", "optimized"):  # Warm up: every library loaded.
      warm = SegmentedModel(seed, kernels)
      warm.run(np.zeros((1,) + warm.input_shape, np.int8))
      del warm
  for index in indices:
    out.write(json.dumps(run_mutant(seeds, index, run_seed, workdir)) + "\n")
    out.flush()


def fuzz(mutants: int, workers: int = 2, run_seed: int = 0, start: int = 0,
         workdir: str | None = None, progress=None) -> dict:
  """Runs mutants [start, start + mutants) in `workers` fork servers; a summary."""
  return drive("forge_tflm.testing.artifact_fuzz", mutants, workers, run_seed, start, workdir,
               progress)


def drive(module: str, mutants: int, workers: int = 2, run_seed: int = 0, start: int = 0,
          workdir: str | None = None, progress=None, worker_args=()) -> dict:
  """Runs mutants [start, start + mutants) in `workers` fork servers (`python -m
  module --worker ...`, writing one JSON record per mutant) and sums them up. A
  rejection's origin is its message's leading "[origin]"; the ones not from
  "validator" or "manifest" are listed."""
  workdir = workdir or tempfile.mkdtemp(prefix="forge_fuzz_")
  cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
  procs = []
  for w in range(workers):
    wdir = os.path.join(workdir, f"worker{w}")
    os.makedirs(wdir, exist_ok=True)
    cmd = [sys.executable, "-m", module, "--worker",
           f"--run_seed={run_seed}", f"--start={start + w}", f"--stop={start + mutants}",
           f"--step={workers}", f"--workdir={wdir}", *worker_args]
    env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get(
        "PYTHONPATH", ""))
    with open(os.path.join(wdir, "worker.log"), "w") as log:  # Library chatter.
      procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log,
                                    cwd=REPO_ROOT, env=env, text=True))
  counts = collections.Counter()
  by_mutator = collections.defaultdict(collections.Counter)
  by_seed = collections.defaultdict(collections.Counter)
  rejected_by = collections.Counter()
  findings, seconds, not_validator = [], [], []
  t0 = time.time()
  import selectors
  sel = selectors.DefaultSelector()
  for p in procs:
    sel.register(p.stdout, selectors.EVENT_READ, p)
  open_streams = len(procs)
  done = 0
  while open_streams:
    for key, _ in sel.select():
      line = key.fileobj.readline()
      if not line:
        sel.unregister(key.fileobj)
        open_streams -= 1
        continue
      rec = json.loads(line)
      done += 1
      counts[rec["outcome"]] += 1
      by_mutator[rec["mutator"]][rec["outcome"]] += 1
      by_seed[rec["seed"]][rec["outcome"]] += 1
      seconds.append(rec["seconds"])
      if rec["outcome"] == "rejected":
        origin = rec["message"].split("]")[0].lstrip("[")
        rejected_by[origin] += 1
        if origin not in ("validator", "manifest") and len(not_validator) < 100:
          not_validator.append(rec)
      if rec["outcome"] in FAILURES:
        findings.append(rec)
      if progress and done % 1000 == 0:
        progress(done, counts)
  codes = [p.wait() for p in procs]
  cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
  return {"mutants": done, "workers": workers, "run_seed": run_seed, "start": start,
          "counts": dict(counts), "by_mutator": {k: dict(v) for k, v in by_mutator.items()},
          "by_seed": {k: dict(v) for k, v in by_seed.items()},
          "rejected_by": dict(rejected_by), "findings": findings,
          "rejected_not_by_validator": not_validator,
          "worker_exit_codes": codes, "wall_seconds": round(time.time() - t0, 1),
          "cpu_seconds": round(cpu.ru_utime + cpu.ru_stime - cpu0.ru_utime - cpu0.ru_stime,
                               1),
          "max_mutant_seconds": max(seconds, default=0.0),
          "mean_mutant_seconds": round(float(np.mean(seconds)) if seconds else 0.0, 4),
          "workdir": workdir}



# -- in-process fuzzing (inputs read by Python code only: nothing can abort) ----------

class CpuLimit(Exception):
  """A mutant used more CPU than its fuzzer allows (a hang, for an in-process one)."""


@contextlib.contextmanager
def cpu_limit(seconds: float):
  """Raises CpuLimit in the block after `seconds` of this process's CPU time (not wall
  time: a loaded machine does not turn a slow mutant into a hang)."""
  def expired(signum, frame):
    raise CpuLimit
  previous = signal.signal(signal.SIGPROF, expired)
  signal.setitimer(signal.ITIMER_PROF, seconds)
  try:
    yield
  finally:
    signal.setitimer(signal.ITIMER_PROF, 0)
    signal.signal(signal.SIGPROF, previous)


IN_PROCESS_PASSES = ("ok", "rejected", "verified", "not_verified", "accepted")


def reason(message: str) -> str:
  """A message without its numbers and quoted values, to count kinds of reasons."""
  out, quoted = [], None
  for ch in message[:90]:
    if quoted:
      quoted = None if ch == quoted else quoted
      continue
    if ch in "'\"":
      quoted = ch
      out.append("…")
    elif not ch.isdigit():
      out.append(ch)
  return "".join(out)


def in_process(mutate, check, mutants: int, start: int, outcomes, progress=None,
               run_seed: int = 0) -> dict:
  """Mutants [start, start + mutants): mutate(index) -> (seed, mutator, description,
  data), check(seed, data) -> (outcome, message) (data: bytes, or a tuple ending in
  the bytes); counts per seed and mutator, the most
  frequent refusal reasons, and every outcome not in IN_PROCESS_PASSES as a finding."""
  counts, reasons = collections.Counter(), collections.Counter()
  by_seed = collections.defaultdict(collections.Counter)
  by_mutator = collections.defaultdict(collections.Counter)
  findings, slowest = [], (0.0, None)
  t0, c0 = time.perf_counter(), time.process_time()
  for index in range(start, start + mutants):
    seed, mutator, desc, data = mutate(index)
    c = time.process_time()
    outcome, message = check(seed, data)
    slowest = max(slowest, (time.process_time() - c, index))
    assert outcome in outcomes, outcome
    counts[outcome] += 1
    by_seed[seed][outcome] += 1
    by_mutator[mutator][outcome] += 1
    if outcome in ("rejected", "not_verified"):
      reasons[reason(message)] += 1
    if outcome not in IN_PROCESS_PASSES:
      findings.append({"index": index, "seed": seed, "mutator": mutator, "desc": desc,
                       "outcome": outcome, "message": message[:800],
                       "data": (data[-1] if isinstance(data, tuple) else data).decode(
                           "utf-8", "replace")[:4000]})
    if progress and (index - start + 1) % 10_000 == 0:
      progress(index - start + 1, counts)
  return {"mutants": mutants, "run_seed": run_seed, "start": start, "counts": dict(counts),
          "by_seed": {k: dict(v) for k, v in by_seed.items()},
          "by_mutator": {k: dict(v) for k, v in by_mutator.items()},
          "reasons": dict(reasons.most_common(12)), "findings": findings,
          "slowest_cpu_seconds": slowest[0], "slowest_index": slowest[1],
          "wall_seconds": time.perf_counter() - t0,
          "cpu_seconds": time.process_time() - c0}

def in_process_main(fuzz, doc: str, argv=None, failed=lambda s: bool(s["findings"])) -> int:
  """main() of an in-process fuzzer: --mutants, --run_seed, --start; the summary as
  JSON on stdout; exit status 1 when `failed(summary)`."""
  p = argparse.ArgumentParser(description=doc.split("\n")[0])
  p.add_argument("--mutants", type=int, default=2000)
  p.add_argument("--run_seed", type=int, default=0)
  p.add_argument("--start", type=int, default=0)
  args = p.parse_args(argv)
  summary = fuzz(args.mutants, args.run_seed, args.start)
  json.dump(summary, sys.stdout, indent=1)
  return 1 if failed(summary) else 0


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--worker", action="store_true")
  p.add_argument("--run_seed", type=int, default=0)
  p.add_argument("--start", type=int, default=0)
  p.add_argument("--stop", type=int, default=0)
  p.add_argument("--step", type=int, default=1)
  p.add_argument("--workdir", default=None)
  p.add_argument("--mutants", type=int, default=1000)
  p.add_argument("--workers", type=int, default=2)
  p.add_argument("--kernels", default="reference")
  p.add_argument("--load", nargs="*", default=None,
                 help="run these files through the loading path, each in a child;"
                      " one JSON record per line")
  args = p.parse_args(argv)
  if args.load is not None:
    from forge_tflm.runtime.segmented import SegmentedModel  # noqa: F401 - preload.
    workdir = tempfile.mkdtemp(prefix="forge_load_")
    for path in args.load:
      print(json.dumps(dict(run_isolated(path, args.kernels, workdir), path=path)),
            flush=True)
    return 0
  if args.worker:
    worker(args.run_seed, range(args.start, args.stop, args.step), args.workdir,
           sys.stdout)
    return 0
  return campaign(fuzz, args, FAILURES)


def campaign(fuzz_fn, args, failures) -> int:
  """A fuzzer's command line without --worker/--load: runs the campaign with progress on
  stderr, prints its summary; exit 1 when any mutant ended in one of `failures`."""
  summary = fuzz_fn(args.mutants, args.workers, args.run_seed, args.start, args.workdir,
                    progress=lambda n, c: print(n, dict(c), file=sys.stderr, flush=True))
  print(json.dumps(summary, indent=1))
  return 1 if any(summary["counts"].get(k) for k in failures) else 0


if __name__ == "__main__":
  sys.exit(main())
