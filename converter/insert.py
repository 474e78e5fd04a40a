"""Insert FORGE_RECALIB after the chosen convs (flatbuffer edit).

For a site whose conv writes tensor T with fused activation A:
    conv -> T                      becomes
    conv(activation NONE) -> T_pre -> FORGE_RECALIB(T_pre, beta, |gamma|; A) -> T
T keeps its name, shape and quantization, so every consumer is untouched. T_pre
gets pre-activation quantization (the same as T when A is NONE). The conv's
bias is int32 at scale s_in*s_w and does not depend on the output scale, so
nothing else in the model changes. With targets measured on T itself (an int8
input model) the conv keeps A and T's quantization: T_pre is T's copy, and FORGE
re-applies A after normalizing.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from ai_edge_litert import schema_py_generated as schema

from forge_tflm import tflite_graph as tg
from forge_tflm.converter.sites import BNSite, ConversionError
from forge_tflm.ops import RecalibOptions, encode_options
from forge_tflm.ops.options import activation_from_tflite


@dataclasses.dataclass(frozen=True)
class InsertedSite:
  site: BNSite
  options: RecalibOptions
  input_quant: tuple[float, int]   # T_pre.
  output_quant: tuple[float, int]  # T.
  input_tensor: str
  output_tensor: str
  saturated_fraction: float
  op_index: int = -1  # The FORGE op's index in the rewritten operator list.


def fused_activation(op) -> str:
  code = op.builtinOptions.fusedActivationFunction
  act = activation_from_tflite(code)
  if act is None:
    raise ConversionError(f"conv op has unsupported fused activation code {code}")
  return act.name


def insert_recalib(model: "schema.ModelT", sites: list[BNSite], op_index: dict[str, int],
                   make_options, preact) -> list[InsertedSite]:
  """Rewrites `model` in place.

  make_options(site, activation) -> RecalibOptions.
  preact(site) -> (scale, zero_point, saturated_fraction) for a site whose
    activation moves into FORGE, or None: the conv keeps its activation and output.
  """
  subgraph = model.subgraphs[0]
  opcode = tg.custom_opcode_index(model, tg.FORGE_RECALIB)
  inserted = []
  new_ops: dict[int, object] = {}
  for site in sites:
    i = op_index[site.name]
    conv = subgraph.operators[i]
    activation = fused_activation(conv)
    out_idx = conv.outputs[0]
    out = subgraph.tensors[out_idx]
    out_quant = tg.per_tensor_quant(out)
    if out.shape is None or out.shape[-1] != site.channels:
      raise ConversionError(f"site {site.name}: conv output has shape {out.shape}, BN has"
                            f" {site.channels} channels")
    grid = None if activation == "none" else preact(site)
    if grid is None:
      pre_quant, saturated = out_quant, 0.0
    else:
      scale, zp, saturated = grid
      pre_quant = (scale, zp)

    pre_idx = _add_preact(subgraph, site, out, pre_quant)
    pre = subgraph.tensors[pre_idx]
    consts = _add_targets(model, subgraph, site)
    conv.outputs[0] = pre_idx
    if grid is not None:
      conv.builtinOptions.fusedActivationFunction = schema.ActivationFunctionType.NONE

    options = make_options(site, activation)
    op = schema.OperatorT()
    op.opcodeIndex = opcode
    op.inputs = [pre_idx] + consts
    op.outputs = [out_idx]
    op.customOptions = list(encode_options(options))
    op.customOptionsFormat = schema.CustomOptionsFormat.FLEXBUFFERS
    new_ops[i] = op
    inserted.append(InsertedSite(site, options, pre_quant, out_quant,
                                 tg.tensor_name(pre), tg.tensor_name(out), saturated))

  forge_index = _splice(subgraph, new_ops)
  return [dataclasses.replace(s, op_index=forge_index[op_index[s.site.name]])
          for s in inserted]


def _add_preact(subgraph, site: BNSite, out, pre_quant) -> int:
  """The conv's new output (FORGE's input): the output's shape and type on its own
  grid; returns its index."""
  pre = schema.TensorT()
  pre.shape = list(out.shape)
  pre.shapeSignature = list(out.shapeSignature) if out.shapeSignature is not None else None
  pre.type = out.type
  pre.buffer = 0
  # The site's name, not the conv output's (often 150+ characters): flash.
  pre.name = f"{site.name}/forge_preact"
  pre.quantization = tg.make_quant(*pre_quant)
  subgraph.tensors.append(pre)
  return len(subgraph.tensors) - 1


def _add_targets(model, subgraph, site: BNSite) -> list[int]:
  """The site's float32 targets as constant tensors: [beta, gamma_abs] indices."""
  consts = []
  for suffix, values in (("beta", site.beta), ("gamma_abs", site.gamma_abs)):
    t = schema.TensorT()
    t.shape = [site.channels]
    t.type = schema.TensorType.FLOAT32
    t.buffer = tg.add_const_buffer(model, np.asarray(values, np.float32))
    t.name = f"{site.name}/forge_{suffix}"
    subgraph.tensors.append(t)
    consts.append(len(subgraph.tensors) - 1)
  return consts


def _splice(subgraph, new_ops: dict[int, object]) -> dict[int, int]:
  """Puts each new op right after its conv; returns conv index -> the new op's index."""
  ops = []
  forge_index = {}
  for i, op in enumerate(subgraph.operators):
    ops.append(op)
    if i in new_ops:
      forge_index[i] = len(ops)
      ops.append(new_ops[i])
  subgraph.operators = ops
  return forge_index


def with_options(model: "schema.ModelT", site: InsertedSite,
                 options: RecalibOptions) -> InsertedSite:
  """`site` with `options`, written into its FORGE op's custom options (a later pass
  that sets an option: label-safe sites)."""
  model.subgraphs[0].operators[site.op_index].customOptions = list(encode_options(options))
  return dataclasses.replace(site, options=options)
