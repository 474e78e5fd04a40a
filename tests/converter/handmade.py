"""A small int8 TFLite model built by hand with the flatbuffer object API.

input [1,H,W,Cin] -> CONV_2D #0 (fused act0) -> t0 [1,H,W,C0] -> CONV_2D #1 (fused act1)
-> t1 [1,H,W,C1] (the output). Weights are int8 per output channel, biases int32, as
TFLiteConverter writes them, so the converter's passes (match, insert) and the LiteRT
runtime can be tested on it without TensorFlow.
"""

from __future__ import annotations

import numpy as np
from ai_edge_litert import schema_py_generated as schema

from forge_tflm import tflite_graph as tg
from forge_tflm.converter.sites import BNSite
from forge_tflm.ops import ACTIVATIONS


def _tensor(model, sg, name, shape, ttype, quant=None, data=None) -> int:
  t = schema.TensorT()
  t.name, t.shape, t.type = name, list(shape), ttype
  t.buffer = 0 if data is None else tg.add_const_buffer(model, data)
  t.quantization = quant
  sg.tensors.append(t)
  return len(sg.tensors) - 1


def _per_channel(scales) -> "schema.QuantizationParametersT":
  q = schema.QuantizationParametersT()
  q.scale = [float(s) for s in scales]
  q.zeroPoint = [0] * len(scales)
  q.quantizedDimension = 0
  return q


def two_convs(activations=("relu", "none"), channels=(4, 3), size=4, cin=2, seed=0):
  """(model_t, weights): weights[i] is conv i's float kernel [O, 1, 1, I] (what its
  int8 weights dequantize to exactly)."""
  rng = np.random.default_rng(seed)
  model = schema.ModelT()
  model.version, model.buffers, model.operatorCodes = 3, [schema.BufferT()], []
  code = schema.OperatorCodeT()
  code.builtinCode = code.deprecatedBuiltinCode = schema.BuiltinOperator.CONV_2D
  code.version = 1
  model.operatorCodes.append(code)
  sg = schema.SubGraphT()
  sg.tensors, sg.operators = [], []
  x = _tensor(model, sg, "input", [1, size, size, cin], schema.TensorType.INT8,
              tg.make_quant(1 / 64, 0))
  weights, prev, prev_c, s_in = [], x, cin, 1 / 64
  for i, (act, c) in enumerate(zip(activations, channels)):
    w_q = rng.integers(-127, 128, (c, 1, 1, prev_c)).astype(np.int8)
    w_scale = rng.uniform(0.002, 0.01, c)
    weights.append(w_q.astype(np.float64) * w_scale.reshape(-1, 1, 1, 1))
    w = _tensor(model, sg, f"conv{i}/weights", w_q.shape, schema.TensorType.INT8,
                _per_channel(w_scale), w_q)
    bias = rng.integers(-200, 200, c).astype(np.int32)
    b = _tensor(model, sg, f"conv{i}/bias", [c], schema.TensorType.INT32,
                _per_channel(s_in * w_scale), bias)
    out = _tensor(model, sg, f"t{i}", [1, size, size, c], schema.TensorType.INT8,
                  tg.make_quant(0.05, -128 if act != "none" else 0))
    op = schema.OperatorT()
    op.opcodeIndex, op.inputs, op.outputs = 0, [prev, w, b], [out]
    op.builtinOptionsType = schema.BuiltinOptions.Conv2DOptions
    opts = schema.Conv2DOptionsT()
    opts.padding, opts.strideW, opts.strideH = schema.Padding.SAME, 1, 1
    opts.dilationWFactor = opts.dilationHFactor = 1
    opts.fusedActivationFunction = ACTIVATIONS[act].tflite_code
    op.builtinOptions = opts
    sg.operators.append(op)
    prev, prev_c, s_in = out, c, 0.05
  sg.inputs, sg.outputs = [x], [prev]
  model.subgraphs = [sg]
  return model, weights


def site_for(weights: np.ndarray, name: str, activation: str = "none",
             seed: int = 0) -> BNSite:
  """A Conv->BN site whose folded kernel is `weights` (float, [O, H, W, I])."""
  rng = np.random.default_rng(seed)
  c = weights.shape[0]
  return BNSite(name=name, conv=f"{name}_conv", kind="conv", activation=activation,
                beta=rng.normal(0, 0.5, c).astype(np.float32),
                gamma_abs=rng.uniform(0.5, 2.0, c).astype(np.float32), eps=1e-3,
                folded_kernel=weights.astype(np.float32))
