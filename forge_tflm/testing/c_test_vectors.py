"""Writes forge_recalib_test_vectors.h for the op's C tests (TFLM kernel, core).

Expected outputs come from the numpy reference (forge_tflm/ops/reference.py);
when the C core extension is built they are also computed with it and must be
identical. Deterministic (fixed seed), so the checked-in header can be
compared with a fresh run (tests/custom_ops/test_tflm_kernel.py does).

  python -m forge_tflm.testing.c_test_vectors \
      custom_ops/forge_recalib/micro/forge_recalib_test_vectors.h

It lives in the package (custom_ops/ imports nothing from it), with what the tests
share: it also checks each rule case with the model check.
"""

from __future__ import annotations

import sys

import numpy as np

from forge_tflm import ops

HEADER_GUARD = "FORGE_RECALIB_MICRO_FORGE_RECALIB_TEST_VECTORS_H_"


def _c_array(ctype: str, name: str, values, per_line: int = 16) -> str:
  flat = np.asarray(values).ravel()
  if ctype == "float":
    items = [f"{float(v)!r}f" if np.isfinite(v) else "0.0f" for v in flat]
    items = [i.replace("inf", "INFINITY") for i in items]
  else:
    items = [str(int(v)) for v in flat]
  lines = [", ".join(items[i:i + per_line]) for i in range(0, len(items), per_line)]
  body = ",\n    ".join(lines)
  align = "alignas(8) " if ctype == "uint8_t" else ""
  return f"{align}const {ctype} {name}[{len(flat)}] = {{\n    {body}}};\n"


def _run_both(x, state, opts, quant, mode):
  """Reference output; cross-checked against the C core when it is built."""
  c_state = state.copy()
  y = ops.forge_recalib_reference(x, state, opts, quant, mode)
  if ops.c_core_available():
    y_c = ops.forge_recalib_c(x, c_state, opts, quant, mode)
    assert np.array_equal(y, y_c), "C core differs from the reference"
    assert np.array_equal(state.data.view(np.uint32), c_state.data.view(np.uint32))
  return y


def _shifted_batches(rng, shape, steps, shift, scale):
  out = []
  for _ in range(steps):
    x = rng.normal(shift, scale, size=shape)
    out.append(np.clip(np.rint(x), -128, 127).astype(np.int8))
  return out


def _case(name, rng, shape, opts, quant, steps):
  """Arrays for a stream: adapt outputs per step, then frozen on step 0's input
  with the adapted state, then frozen on it with the clean state."""
  c = shape[-1]
  beta = rng.normal(0.0, 0.5, size=c).astype(np.float32)
  gamma = np.abs(rng.normal(1.0, 0.3, size=c)).astype(np.float32)
  xs = _shifted_batches(rng, shape, steps, shift=-15.0, scale=30.0)
  state = ops.RecalibState(beta, gamma)
  adapt = [_run_both(x, state, opts, quant, "adapt") for x in xs]
  frozen_adapted = _run_both(xs[0], state, opts, quant, "frozen")
  state.reset()
  frozen_clean = _run_both(xs[0], state, opts, quant, "frozen")
  p = f"k{name}"
  text = [f"// {name}: shape {list(shape)}, {opts}, {quant}\n",
          f"constexpr int {p}Rank = {len(shape)};\n",
          f"constexpr int {p}Dims[] = {{{len(shape)}, {', '.join(map(str, shape))}}};\n",
          f"constexpr int {p}Channels = {c};\n",
          f"constexpr int {p}Elements = {int(np.prod(shape))};\n",
          f"constexpr int {p}Steps = {steps};\n",
          f"constexpr float {p}ScaleX = {float(np.float32(quant.s_x))!r}f;\n",
          f"constexpr int {p}ZeroX = {quant.z_x};\n",
          f"constexpr float {p}ScaleY = {float(np.float32(quant.s_y))!r}f;\n",
          f"constexpr int {p}ZeroY = {quant.z_y};\n",
          _c_array("uint8_t", f"{p}Options", np.frombuffer(
              ops.encode_options(opts), np.uint8)),
          _c_array("float", f"{p}Beta", beta),
          _c_array("float", f"{p}GammaAbs", gamma),
          _c_array("int8_t", f"{p}Input", np.stack(xs)),
          _c_array("int8_t", f"{p}ExpectedAdapt", np.stack(adapt)),
          _c_array("int8_t", f"{p}ExpectedFrozenAdapted", frozen_adapted),
          _c_array("int8_t", f"{p}ExpectedFrozenClean", frozen_clean)]
  return "".join(text)


# -- FORGE rule cases: one-op models for both sides ---------------------------------
#
# Each is a complete .tflite with one FORGE_RECALIB op (x = model input, y = model
# output). The kernel test runs every one through MicroInterpreter (AllocateTensors =
# the kernel's Init + Prepare, then Invoke) and the host test
# (tests/custom_ops/test_forge_rule_agreement.py) through forge_tflm.model_check: both
# must accept exactly the cases marked accepted. Only FORGE-specific properties vary;
# the rest of each model is well formed.

_RULE_SHAPE = (1, 4, 4, 5)


def _rule_model(x_shape=_RULE_SHAPE, y_shape=None, x_type=None, y_type=None,
                beta_type=None, gamma_type=None, beta_shape=None, gamma_shape=None,
                beta=None, gamma=None, x_quant=(0.05, -7), y_quant=(0.03, -100),
                options=b"default", inputs=None, outputs=None) -> bytes:
  from ai_edge_litert import schema_py_generated as schema

  from forge_tflm import tflite_graph as tg

  t = schema.TensorType
  rng = np.random.default_rng(99)
  c = x_shape[-1] if x_shape else 1
  model = schema.ModelT()
  model.version, model.buffers, model.operatorCodes = 3, [schema.BufferT()], []
  model.description = "forge_recalib rule case"
  sg = schema.SubGraphT()
  sg.tensors, sg.operators, sg.name = [], [], "main"

  def quant(q):
    if q is None:
      return None
    scales, zeros = q
    qp = schema.QuantizationParametersT()
    qp.scale = list(np.atleast_1d(scales).astype(float))
    qp.zeroPoint = list(np.atleast_1d(zeros).astype(int))
    qp.quantizedDimension = len(x_shape) - 1 if len(qp.scale) > 1 else 0
    return qp

  def tensor(name, shape, ttype, q=None, data=None):
    ten = schema.TensorT()
    ten.name, ten.shape, ten.type, ten.quantization = name, list(shape), ttype, q
    ten.buffer = 0 if data is None else tg.add_const_buffer(model, data)
    sg.tensors.append(ten)
    return len(sg.tensors) - 1

  default_beta = rng.normal(0.0, 0.5, c).astype(np.float32)
  default_gamma = rng.uniform(0.5, 2.0, c).astype(np.float32)
  b_shape = beta_shape or (c,)
  g_shape = gamma_shape or (c,)
  b_type = beta_type if beta_type is not None else t.FLOAT32
  g_type = gamma_type if gamma_type is not None else t.FLOAT32
  dtypes = {t.FLOAT32: np.float32, t.INT8: np.int8, t.INT32: np.int32}
  b_data = (beta if beta is not None else np.resize(default_beta, b_shape)
            ).astype(dtypes[b_type])
  g_data = (gamma if gamma is not None else np.resize(default_gamma, g_shape)
            ).astype(dtypes[g_type])
  x = tensor("x", x_shape, x_type if x_type is not None else t.INT8, quant(x_quant))
  b = tensor("beta", b_shape, b_type, data=b_data)
  g = tensor("gamma_abs", g_shape, g_type, data=g_data)
  y = tensor("y", y_shape or x_shape, y_type if y_type is not None else t.INT8,
             quant(y_quant))
  op = schema.OperatorT()
  op.opcodeIndex = tg.custom_opcode_index(model, "FORGE_RECALIB")
  op.inputs = list(inputs if inputs is not None else [x, b, g])
  op.outputs = list(outputs if outputs is not None else [y])
  if options == b"default":
    options = ops.encode_options(ops.RecalibOptions(momentum=0.25, eps=1e-3,
                                                    activation="relu6"))
  if options is not None:
    op.customOptions = list(options)
    op.customOptionsFormat = schema.CustomOptionsFormat.FLEXBUFFERS
  sg.operators.append(op)
  sg.inputs, sg.outputs = [x], [y]
  model.subgraphs = [sg]
  return tg.save_model(model)


def _flexbuffer_map(**items) -> bytes:
  from flatbuffers import flexbuffers

  fbb = flexbuffers.Builder()
  with fbb.Map():
    for key, value in items.items():
      fbb.Key(key)
      if isinstance(value, float):
        fbb.Float(value)
      elif isinstance(value, int):
        fbb.Int(value)
      else:
        fbb.String(value)
  return bytes(fbb.Finish())


def rule_cases() -> list[tuple[str, bytes, bool]]:
  """(name, model bytes, accepted) for the FORGE rule both sides enforce."""
  from ai_edge_litert import schema_py_generated as schema

  t = schema.TensorType
  c = _RULE_SHAPE[-1]
  nan_beta = np.zeros(c, np.float32)
  nan_beta[2] = np.nan
  neg_gamma = np.ones(c, np.float32)
  neg_gamma[1] = -1.0
  cases = [
      ("valid", {}, True),
      ("valid_rank2", dict(x_shape=(3, c)), True),
      ("valid_rank3", dict(x_shape=(2, 6, c)), True),
      ("valid_scale_2^-40", dict(x_quant=(2.0**-40, 0)), True),
      ("valid_beta_2^40_gamma_0", dict(beta=np.full(c, 2.0**40, np.float32),
                                       gamma=np.zeros(c, np.float32)), True),
      ("valid_m_2^22", dict(x_shape=(1, 2048, 2048, 1)), True),
      ("beta_int8", dict(beta_type=t.INT8), False),  # issue 20: host accepted it
      ("gamma_int8", dict(gamma_type=t.INT8), False),
      ("beta_int32", dict(beta_type=t.INT32), False),
      ("x_uint8", dict(x_type=t.UINT8, x_quant=(0.05, 0)), False),
      ("y_int16", dict(y_type=t.INT16, y_quant=(0.03, 0)), False),
      ("x_float32", dict(x_type=t.FLOAT32, x_quant=None), False),
      ("x_rank1", dict(x_shape=(c,)), False),
      ("x_rank5", dict(x_shape=(1, 1, 2, 2, c)), False),
      ("y_shape_differs", dict(y_shape=(1, 4, 2, 2 * c)), False),
      ("x_batch_0", dict(x_shape=(0, 4, 4, c)), False),
      ("m_over_2^22", dict(x_shape=(1, 2049, 2048, 1)), False),
      ("beta_shape_c_plus_1", dict(beta_shape=(c + 1,)), False),
      ("gamma_rank2", dict(gamma_shape=(1, c)), False),
      ("x_per_channel", dict(x_quant=(np.full(c, 0.05), np.zeros(c, int))), False),
      ("x_not_quantized", dict(x_quant=None), False),
      ("x_zero_point_missing", dict(x_quant=([0.05], [])), False),
      ("x_scale_0", dict(x_quant=(0.0, 0)), False),
      ("y_scale_2^41", dict(y_quant=(2.0**41, 0)), False),
      ("y_scale_2^-41", dict(y_quant=(2.0**-41, 0)), False),
      ("y_zero_point_128", dict(y_quant=(0.03, 128)), False),
      ("beta_nan", dict(beta=nan_beta), False),
      ("gamma_negative", dict(gamma=neg_gamma), False),
      ("beta_2^41", dict(beta=np.full(c, 2.0**41, np.float32)), False),
      ("options_missing", dict(options=None), False),
      ("options_momentum_and_window", dict(options=_flexbuffer_map(
          momentum=0.1, window=8)), False),
      ("options_unknown_key", dict(options=_flexbuffer_map(momentum=0.1, gain=1.0)),
       False),
      ("options_eps_0", dict(options=_flexbuffer_map(momentum=0.1, eps=0.0)), False),
      ("options_truncated", dict(options=ops.encode_options(
          ops.RecalibOptions(momentum=0.1))[:-3]), False),
      ("two_inputs", dict(inputs=[0, 1]), False),
      ("four_inputs", dict(inputs=[0, 1, 2, 2]), False),
      ("beta_input_missing", dict(inputs=[0, -1, 2]), False),
      ("two_outputs", dict(outputs=[3, 3]), False),
      ("valid_label_safe", dict(options=_flexbuffer_map(window=8, label_safe=1)), True),
      ("options_label_safe_2", dict(options=_flexbuffer_map(window=8, label_safe=2)),
       False),
      # Removed options (class-balanced statistics) are unknown keys.
      ("options_unknown_classes", dict(options=_flexbuffer_map(window=8, classes=3)),
       False),
      ("options_unknown_class_margin", dict(options=_flexbuffer_map(
          window=8, class_margin=5)), False),
  ]
  return [(name, _rule_model(**kwargs), accepted) for name, kwargs, accepted in cases]


def _rule_cases_text() -> str:
  cases = rule_cases()
  try:  # The host's verdicts, when forge_tflm can validate (always in the repo).
    from forge_tflm.model_check import check_model
  except ImportError:
    check_model = None
  out = ["// FORGE rule cases (rule_cases() in forge_tflm/testing/c_test_vectors.py): one-op models\n"
         "// that the TFLM kernel (Init + Prepare + Eval) and the host validator\n"
         "// (forge_tflm.model_check) must both accept or both reject.\n"]
  for k, (name, data, accepted) in enumerate(cases):
    if check_model is not None:
      try:
        check_model(data, name)
        host = True
      except ValueError:
        host = False
      assert host == accepted, f"host validator {'accepts' if host else 'rejects'} {name}"
    body = _c_array("uint8_t", f"kRuleCase{k}", np.frombuffer(data, np.uint8), 24)
    out.append(f"// {name}: {'accepted' if accepted else 'rejected'}\n"
               + body.replace("alignas(8)", "alignas(16)"))
  out.append("struct RuleCase {\n  const char* name;\n  const uint8_t* model;\n"
             "  bool accepted;\n};\n")
  out.append(f"constexpr int kRuleCaseCount = {len(cases)};\n")
  out.append("const RuleCase kRuleCases[kRuleCaseCount] = {\n" + "".join(
      f"    {{\"{name}\", kRuleCase{k}, {'true' if accepted else 'false'}}},\n"
      for k, (name, _, accepted) in enumerate(cases)) + "};\n")
  return "".join(out)


# The modes of a modes case's steps: adapt_safe (adapt where the op is label-safe,
# source mode elsewhere) between adapt, source and frozen.
_MODE_STEPS = ("adapt", "adapt_safe", "source", "adapt_safe", "frozen", "adapt")


def _modes_case(rng, label_safe: bool) -> str:
  """A one-op model with option label_safe set or not, per step the mode of
  _MODE_STEPS; expected outputs from the numpy reference."""
  shape, steps = (2, 3, 3, 4), len(_MODE_STEPS)
  opts = ops.RecalibOptions(window=6, activation="relu", label_safe=1 if label_safe else None)
  quant = ops.QuantParams(s_x=0.05, z_x=-7, s_y=0.03, z_y=-100)
  model = _rule_model(x_shape=shape, x_quant=(quant.s_x, quant.z_x),
                      y_quant=(quant.s_y, quant.z_y), options=ops.encode_options(opts))
  from forge_tflm.model_check import check_model, forge_node
  spec = forge_node(check_model(model), 0)
  node = ops.RecalibOp(opts, quant, spec.beta, spec.gamma_abs)
  xs = _shifted_batches(rng, shape, steps, shift=-5.0, scale=30.0)
  expected = [node.reference(x, mode) for x, mode in zip(xs, _MODE_STEPS)]
  p = "kModesSafe" if label_safe else "kModesUnsafe"
  modes = np.array([ops.MODES.index(m) for m in _MODE_STEPS], np.int32)
  return "".join([
      f"// {p[1:]}: shape {list(shape)}, {opts}, {node.quant}: per step the mode of"
      f" {p}Modes\n",
      f"constexpr int {p}Elements = {int(np.prod(shape))};\n",
      f"constexpr int {p}Steps = {steps};\n",
      _c_array("int32_t", f"{p}Modes", modes),
      _c_array("uint8_t", f"{p}Model", np.frombuffer(model, np.uint8), 24).replace(
          "alignas(8)", "alignas(16)"),
      _c_array("int8_t", f"{p}Input", np.stack(xs)),
      _c_array("int8_t", f"{p}Expected", np.stack(expected))])


def generate() -> str:
  rng = np.random.default_rng(1234)
  cases = [
      _case("Stream", rng, (2, 3, 3, 5),
            ops.RecalibOptions(momentum=0.25, eps=1e-3, activation="relu6",
                               variance="running"),
            ops.QuantParams(s_x=0.05, z_x=-7, s_y=0.03, z_y=-100), steps=3),
      _case("Window", rng, (8, 3),
            ops.RecalibOptions(window=16, activation="relu", variance="batch"),
            ops.QuantParams(s_x=0.1, z_x=3, s_y=0.02, z_y=-128), steps=2),
      # M = 4*16*16 = 1024 elements per channel: the C core's LUT path.
      _case("Lut", rng, (4, 16, 16, 1),
            ops.RecalibOptions(momentum=0.5, activation="none"),
            ops.QuantParams(s_x=0.02, z_x=0, s_y=0.05, z_y=10), steps=1),
  ]
  bad = {
      "UnknownKey": bytes(ops.encode_options(ops.RecalibOptions(momentum=0.1)))
                    .replace(b"momentum", b"momentun"),
      "Truncated": ops.encode_options(ops.RecalibOptions(momentum=0.1))[:-3],
  }
  out = [f"// Generated by forge_tflm/testing/c_test_vectors.py from\n"
         f"// the numpy reference (forge_tflm/ops/reference.py), cross-checked with\n"
         f"// the C core. Do not edit; regenerate with:\n"
         f"//   python -m forge_tflm.testing.c_test_vectors"
         f" custom_ops/forge_recalib/micro/forge_recalib_test_vectors.h\n"
         f"#ifndef {HEADER_GUARD}\n#define {HEADER_GUARD}\n\n"
         f"#include <stdint.h>\n\nnamespace forge_recalib_test {{\n\n"]
  out += [c + "\n" for c in cases]
  out.append(_modes_case(rng, label_safe=True) + "\n")
  out.append(_modes_case(rng, label_safe=False) + "\n")
  for name, data in bad.items():
    out.append(_c_array("uint8_t", f"kBadOptions{name}", np.frombuffer(data, np.uint8)))
  out.append("\n" + _rule_cases_text())
  out.append(f"\n}}  // namespace forge_recalib_test\n\n#endif  // {HEADER_GUARD}\n")
  return "".join(out)


def main(argv) -> None:
  text = generate()
  if len(argv) > 1:
    with open(argv[1], "w") as f:
      f.write(text)
  else:
    sys.stdout.write(text)


if __name__ == "__main__":
  main(sys.argv)
