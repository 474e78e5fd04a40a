"""forge_tflm.model_check: one rule per malformation, one line per rejection.

Each case mutates the fuzz seed (forge_tflm/testing/artifact_fuzz.seed_model: every
operator the device registers) in one way and expects the validator's message. Rules
marked "fuzz:" were found by the artifact fuzz (tests/runtime/test_fuzz_artifacts.py):
without them the mutant reached LiteRT, which aborted, crashed or refused it.
"""

import re

import numpy as np
import pytest
from ai_edge_litert import schema_py_generated as schema

from forge_tflm import model_check as mc
from forge_tflm import tflite_graph as tg
from forge_tflm.artifact import Artifact, ArtifactError
from forge_tflm.runtime.segmented import SegmentedModel
from forge_tflm.testing import artifact_fuzz as af

T = schema.TensorType
SEED = af.seed_model()
# Operators of the seed: 0 CONV_2D, 1 FORGE_RECALIB, 2 DEPTHWISE_CONV_2D, 3 ADD,
# 4 AVERAGE_POOL_2D, 5 MEAN, 6 RESHAPE, 7 FULLY_CONNECTED, 8 SOFTMAX.


def _mutated(fn, seed=None) -> bytes:
  m = tg.load_model(seed or SEED)
  fn(m, m.subgraphs[0])
  return tg.save_model(m)


def _tensor(sg, name):
  return next(t for t in sg.tensors if tg.tensor_name(t) == name)


def _set(obj, **kw):
  for k, v in kw.items():
    setattr(obj, k, v)


def _quant(sg, name, **kw):
  _set(_tensor(sg, name).quantization, **kw)


def _options(sg, op, **kw):
  _set(sg.operators[op].builtinOptions, **kw)


def _buffer_of(m, sg, name):
  return m.buffers[_tensor(sg, name).buffer]


def _own_empty_buffer(m, sg, name):
  b = schema.BufferT()
  b.data = np.zeros(0, np.uint8)
  m.buffers.append(b)
  _tensor(sg, name).buffer = len(m.buffers) - 1


def _swap(sg, a, b):
  sg.operators[a], sg.operators[b] = sg.operators[b], sg.operators[a]


def _opcode(m, sg, op, code):
  oc = m.operatorCodes[sg.operators[op].opcodeIndex]
  oc.builtinCode, oc.deprecatedBuiltinCode = code, min(code, 127)


def _new_tensor(sg, like, name, shape=None):
  t = schema.TensorT()
  src = _tensor(sg, like)
  _set(t, shape=list(shape if shape is not None else src.shape), type=src.type,
       buffer=0, name=name, quantization=src.quantization)
  sg.tensors.append(t)
  return len(sg.tensors) - 1


RULES = {
    # Graph structure.
    "input_index_-2": (lambda m, sg: sg.operators[3].inputs.__setitem__(1, -2),
                       r"operator 3 \(ADD\): input 1 is tensor index -2"),
    "input_index_out_of_range": (lambda m, sg: sg.operators[3].inputs.__setitem__(1, 99),
                                 r"operator 3 \(ADD\): input 1 is tensor index 99"),
    "output_index_-1": (lambda m, sg: sg.operators[4].outputs.__setitem__(0, -1),
                        r"operator 4 \(AVERAGE_POOL_2D\): output 0 is tensor index -1"),
    "read_before_written": (lambda m, sg: _swap(sg, 3, 4),
                            r"operator 3 \(AVERAGE_POOL_2D\): input 0 \(tensor \d+ 'add'\)"
                            r" is read before any operator writes it"),
    "written_twice": (lambda m, sg: sg.operators[4].outputs.__setitem__(
        0, sg.operators[3].outputs[0]),
                      r"operator 4 \(AVERAGE_POOL_2D\): output 0 .* is already written"),
    "output_is_constant": (lambda m, sg: sg.operators[4].outputs.__setitem__(0, 1),
                           r"operator 4 \(AVERAGE_POOL_2D\): output 0 \(tensor 1"
                           r" 'conv0/w'\) is a constant"),
    "opcode_index": (lambda m, sg: _set(sg.operators[2], opcodeIndex=64),
                     r"operator 2: operator code index 64 is not one of the 9 codes"),
    "builtin_code_invalid": (lambda m, sg: _opcode(m, sg, 4, 999),
                             r"operator code \d: builtin code 999 is not a TFLite operator"),
    "builtin_unsupported": (lambda m, sg: _opcode(m, sg, 8, schema.BuiltinOperator.TANH),
                            r"operator 8 \(TANH\): builtin TANH is not supported"),
    "custom_unsupported": (lambda m, sg: _set(m.operatorCodes[sg.operators[1].opcodeIndex],
                                              customCode="OTHER_OP"),
                           r"operator 1 \(OTHER_OP\): unsupported custom op 'OTHER_OP'"),
    "two_model_inputs": (lambda m, sg: _set(sg, inputs=[0, 3]),
                         r"the model has 2 inputs"),
    "model_output_never_written": (lambda m, sg: _set(sg, outputs=[_new_tensor(
        sg, "probs", "orphan")]), r"model output 0 \(tensor 20 'orphan'\) is never written"),
    "two_subgraphs": (lambda m, sg: m.subgraphs.append(sg), r"2 subgraphs"),
    "buffer_0_not_empty": (lambda m, sg: _set(m.buffers[0], data=np.ones(4, np.uint8)),
                           r"buffer 0 must be empty"),
    "buffer_offset": (lambda m, sg: _set(m.buffers[1], offset=64, size=8),
                      r"buffer 1 points outside the flatbuffer"),
    # An activation's buffer with an empty data vector (not left out): LiteRT took it
    # for a 0-byte constant and failed in a two-line message (convert fuzz, issue 53).
    "empty_data_vector": (lambda m, sg: _own_empty_buffer(m, sg, "add"),
                          r"output 0 \(tensor \d+ 'add'\): buffer \d+ holds an empty"
                          r" data vector"),
    # Tensors.
    "shape_0": (lambda m, sg: _set(_tensor(sg, "dw"), shape=[1, 8, 0, 8]),
                r"output 0 \(tensor \d+ 'dw'\): shape \[1,8,0,8\] has a dimension < 1"),
    "shape_2^31_elements": (lambda m, sg: _set(_tensor(sg, "image"),
                                               shape=[1, 65536, 65536, 3]),
                            r"input 0 \(tensor 0 'image'\): shape \[1,65536,65536,3\] has"
                            r" more than 2\^31 elements"),
    "total_bytes": (lambda m, sg: [_new_tensor(sg, "pool", f"unused{i}", [1, 8192, 8192, 8])
                                   for i in range(3)],  # 512 MiB each, unused.
                    r"tensor 21 'unused1': the model's tensors need more than 1073741824"
                    r" bytes together"),
    "shape_signature": (lambda m, sg: _set(_tensor(sg, "image"), shapeSignature=[1, 9]),
                        r"shape signature \[1,9\] does not fit shape \[1,8,8,3\]"),
    "constant_bytes": (lambda m, sg: _set(_buffer_of(m, sg, "fc/b"),
                                          data=np.zeros(12, np.uint8)),
                       r"input 2 \(tensor \d+ 'fc/b'\): constant data is 12 bytes, shape"
                       r" \[10\] of INT32 needs 40"),
    "type_string": (lambda m, sg: _set(_tensor(sg, "mean/axes"), type=T.STRING),
                    r"tensor \d+ 'mean/axes'\): type STRING is not supported"),
    "name_not_utf8": (lambda m, sg: _set(_tensor(sg, "pool"), name=b"po\xffol"),  # fuzz
                      r"'po.ol'\): the name is not valid UTF-8"),
    # Quantization.
    "scale_nan": (lambda m, sg: _quant(sg, "pool", scale=[float("nan")]),
                  r"'pool'\): quantization scale nan is not in"),
    "scale_negative": (lambda m, sg: _quant(sg, "pool", scale=[-0.04]),
                       r"quantization scale -0.04 is not in"),
    "scale_0": (lambda m, sg: _quant(sg, "pool", scale=[0.0]),
                r"quantization scale 0 is not in"),
    "scale_inf": (lambda m, sg: _quant(sg, "pool", scale=[float("inf")]),
                  r"quantization scale inf is not in"),
    "scale_1e30": (lambda m, sg: _quant(sg, "pool", scale=[1e30]),
                   r"quantization scale 1e\+30 is not in"),
    "zero_point_int8": (lambda m, sg: _quant(sg, "pool", zeroPoint=[200]),
                        r"zero point 200 is outside \[-128, 127\] for INT8"),
    "zero_point_int32": (lambda m, sg: _quant(sg, "fc/b", zeroPoint=[3] * 10),
                         r"'fc/b'\): zero point 3 is outside \[0, 0\] for INT32"),
    "scale_zero_point_lengths": (lambda m, sg: _quant(sg, "pool", zeroPoint=[0, 0]),
                                 r"1 quantization scales but 2 zero points"),
    "per_channel_length": (lambda m, sg: _quant(sg, "conv0/w", scale=[0.01] * 7,
                                                zeroPoint=[0] * 7),
                           r"7 per-channel scales do not match dimension 0 of shape"
                           r" \[8,3,3,3\]"),
    "quantized_dimension": (lambda m, sg: _quant(sg, "pool", quantizedDimension=4),  # fuzz
                            r"'pool'\): quantized dimension 4 is outside shape"),
    "activation_per_channel": (lambda m, sg: _quant(sg, "pool", scale=[0.04] * 8,
                                                    zeroPoint=[-128] * 8,
                                                    quantizedDimension=3),
                               r"operator 4 \(AVERAGE_POOL_2D\): output 0 \(tensor \d+"
                               r" 'pool'\) is per-channel quantized"),
    "weights_zero_point": (lambda m, sg: _quant(sg, "conv0/w", zeroPoint=[1] * 8),
                           r"operator 0 \(CONV_2D\): input 1 .* has a non-zero zero point"),
    # Operators.
    "conv_no_bias": (lambda m, sg: _set(sg.operators[0],  # fuzz
                                        inputs=list(sg.operators[0].inputs[:2])),
                     r"operator 0 \(CONV_2D\): has no bias \(input 2\)"),
    "conv_bias_-1": (lambda m, sg: sg.operators[0].inputs.__setitem__(2, -1),  # fuzz
                     r"operator 0 \(CONV_2D\): has no bias \(input 2\)"),
    "conv_dilation": (lambda m, sg: _options(sg, 0, dilationHFactor=65535),  # fuzz
                      r"operator 0 \(CONV_2D\): dilation 65535 is not in \[1, 32767\]"),
    "conv_stride_0": (lambda m, sg: _options(sg, 0, strideW=0),
                      r"operator 0 \(CONV_2D\): stride 0 is not in"),
    "conv_bias_type": (lambda m, sg: _options(sg, 0, quantizedBiasType=9),  # fuzz
                       r"operator 0 \(CONV_2D\): quantized bias type 9"),
    "conv_multiplier": (lambda m, sg: _quant(sg, "conv0/w", scale=[5000.0] * 8),  # fuzz
                        r"operator 0 \(CONV_2D\): the requantization multiplier .* of"
                        r" channel 0 is 392.15"),
    "conv_padding": (lambda m, sg: _options(sg, 0, padding=5),
                     r"padding 5 is neither SAME nor VALID"),
    "conv_activation": (lambda m, sg: _options(sg, 0, fusedActivationFunction=4),
                        r"fused activation 4 is not supported for int8"),
    "conv_options_type": (lambda m, sg: _set(sg.operators[0], builtinOptionsType=5,
                                             builtinOptions=schema.Pool2DOptionsT()),
                          r"operator 0 \(CONV_2D\): builtin options are"
                          r" Pool2DOptions, CONV_2D needs Conv2DOptions"),
    "conv_output_shape": (lambda m, sg: _set(_tensor(sg, "conv0"), shape=[1, 8, 8, 9]),
                          r"operator 0 \(CONV_2D\): .*has shape \[1,8,8,9\], the op"
                          r" computes \[1,8,8,8\]"),
    "conv_filter_channels": (lambda m, sg: _set(_tensor(sg, "image"), shape=[1, 8, 8, 4]),
                             r"input 1 .* has 3 input channels, the input has 4"),
    "depthwise_multiplier": (lambda m, sg: _options(sg, 2, depthMultiplier=2),
                             r"operator 2 \(DEPTHWISE_CONV_2D\): .* a depthwise filter is"),
    "add_broadcast": (lambda m, sg: _set(_tensor(sg, "dw"), shape=[1, 8, 8, 3]),
                      r"shape"),
    "add_ratio": (lambda m, sg: _quant(sg, "add", scale=[1e-9]),
                  r"operator 3 \(ADD\): output 0 \(tensor \d+ 'add'\) scale 1e-09 is too"
                  r" small for input scales"),
    "pool_filter_0": (lambda m, sg: _options(sg, 4, filterWidth=0),
                      r"operator 4 \(AVERAGE_POOL_2D\): filter 0 is not in"),
    "pool_quant": (lambda m, sg: _quant(sg, "pool", zeroPoint=[0]),
                   r"operator 4 \(AVERAGE_POOL_2D\): input and output quantization"
                   r" differ"),
    "mean_axis": (lambda m, sg: _set(_buffer_of(m, sg, "mean/axes"), data=np.frombuffer(
        np.array([1, 7], np.int32).tobytes(), np.uint8)),
                  r"operator 5 \(MEAN\): input 1 .*: axis 7 is outside a rank-4 input"),
    "reshape_two_unknown": (lambda m, sg: _set(_buffer_of(m, sg, "reshape/shape"),
                                               data=np.frombuffer(np.array(
                                                   [-1, -1], np.int32).tobytes(), np.uint8)),
                            r"operator 6 \(RESHAPE\): target shape \[-1,-1\] is not valid"),
    "reshape_mismatch": (lambda m, sg: _set(_buffer_of(m, sg, "reshape/shape"),
                                            data=np.frombuffer(np.array(
                                                [3, 3], np.int32).tobytes(), np.uint8)),
                         r"operator 6 \(RESHAPE\): target shape \[3,3\] does not hold"),
    "reshape_new_shape": (lambda m, sg: _options(sg, 6, newShape=list(range(1, 14))),  # fuzz
                          r"operator 6 \(RESHAPE\): new_shape option \[1,2,.*\] is not valid"),
    "reshape_new_shape_disagrees": (lambda m, sg: _options(sg, 6, newShape=[8, 1]),
                                    r"the shape input \[1,8\] and the new_shape option"
                                    r" \[8,1\] disagree"),
    "op_version_0": (lambda m, sg: _set(m.operatorCodes[0], version=0),  # fuzz
                     r"operator 0 \(CONV_2D\): operator version 0 is not one LiteRT runs"),
    "op_version_reshape_2": (lambda m, sg: _set(m.operatorCodes[
        sg.operators[6].opcodeIndex], version=2),
                             r"operator 6 \(RESHAPE\): operator version 2 .* \(1 to 1\)"),
    "concatenation_activation": (None, r"operator 5 \(CONCATENATION\): fused activation 1:"
                                 r" int8 CONCATENATION takes none"),  # fuzz
    "fc_depth": (lambda m, sg: _set(_tensor(sg, "fc/w"), shape=[8, 10]), r"FULLY_CONNECTED"),
    "softmax_beta_0": (lambda m, sg: _options(sg, 8, beta=0.0),
                       r"operator 8 \(SOFTMAX\): beta 0 must be finite and > 0"),
    "softmax_beta_tiny": (lambda m, sg: _options(sg, 8, beta=1e-20),  # fuzz: SIGABRT
                          r"operator 8 \(SOFTMAX\): beta \* input scale = 1e-21 is below"
                          r" 2\^-26"),
    "softmax_output_scale": (lambda m, sg: _quant(sg, "probs", scale=[0.01]),
                             r"operator 8 \(SOFTMAX\): output 0 .* must have scale 1/256"),
    "model_input_float": (lambda m, sg: _set(_tensor(sg, "image"), type=T.FLOAT32,
                                             quantization=None),
                          r"input 0 \(tensor 0 'image'\) is FLOAT32, CONV_2D needs INT8"),
}


EXTRA = af.seed_model_extra()
# Operators of the extra seed: 0 PAD, 1 CONV_2D, 2 FORGE_RECALIB, 3 MAX_POOL_2D,
# 4 RELU6, 5 CONCATENATION, 6 MUL, 7 SUB, 8 RELU, 9 MEAN, 10 FULLY_CONNECTED.
EXTRA_RULES = {
    "concatenation_activation": lambda m, sg: _options(sg, 5, fusedActivationFunction=1),
    "concatenation_quant": lambda m, sg: _quant(sg, "relu6", scale=[0.05]),
    "pad_negative": lambda m, sg: _set(_buffer_of(m, sg, "pad/paddings"), data=np.frombuffer(
        np.array([[0, 0], [1, 1], [-1, 3], [0, 0]], np.int32).tobytes(), np.uint8)),
    "sub_ratio": lambda m, sg: _quant(sg, "sub", scale=[1e-8]),
    "mul_broadcast": lambda m, sg: _set(_tensor(sg, "mul/k"), shape=[4, 4]),
}
RULES.update({
    "concatenation_quant": (None, r"operator 5 \(CONCATENATION\): input and output"
                                  r" quantization differ"),
    "pad_negative": (None, r"operator 0 \(PAD\): input 1 .*paddings must be in"
                           r" \[0, 32767\]"),
    "sub_ratio": (None, r"operator 7 \(SUB\): output 0 \(tensor \d+ 'sub'\) scale 1e-08"
                        r" is too small"),
    "mul_broadcast": (None, r"operator 6 \(MUL\): input shapes \[1,4,4,16\] and"
                            r" \[1,1,4,4\] do not broadcast"),
})


def test_seed_is_valid_and_runs():
  model = mc.check_model(SEED, "seed.tflite")
  assert len(model.subgraphs[0].operators) == 9
  seg = SegmentedModel(SEED)
  assert seg.run(np.zeros((2,) + seg.input_shape, np.int8)).shape == (2, 10)
  mc.check_model(EXTRA, "extra.tflite")
  seg = SegmentedModel(EXTRA, "optimized")
  assert seg.run(np.zeros((2,) + seg.input_shape, np.int8)).shape == (2, 10)


@pytest.mark.parametrize("name", sorted(RULES))
def test_rule(name):
  fn, pattern = RULES[name]
  data = _mutated(fn) if fn is not None else _mutated(EXTRA_RULES[name], EXTRA)
  with pytest.raises(mc.ModelCheckError) as e:
    mc.check_model(data, "bad.tflite")
  msg = str(e.value)
  assert "\n" not in msg and msg.startswith("bad.tflite: "), msg
  assert re.search(pattern, msg), msg
  assert isinstance(e.value, ArtifactError) and isinstance(e.value, ValueError)


@pytest.mark.parametrize("data,pattern", [
    (b"", r"not a TFLite flatbuffer"),
    (SEED[:3], r"not a TFLite flatbuffer"),
    (SEED[:4] + b"XXXX" + SEED[8:], r"not a TFLite flatbuffer"),
    (b"\xff\xff\x00\x00" + SEED[4:], r"root table offset 65535 outside"),
    (SEED[:200], r"corrupt flatbuffer"),
    (SEED[:len(SEED) // 2], r"corrupt flatbuffer"),
])
def test_file_structure(data, pattern):
  with pytest.raises(mc.ModelCheckError, match=pattern):
    mc.check_model(data, "bad.tflite")


def test_every_truncation_is_one_line():
  for cut in range(0, len(SEED), 37):
    with pytest.raises(mc.ModelCheckError) as e:
      mc.check_model(SEED[:cut], "t.tflite")
    assert "\n" not in str(e.value)


def test_host_ops_are_accepted_only_when_given():
  def add_identity(m, sg):
    code = tg.custom_opcode_index(m, "TEST_ID")
    pre = schema.TensorT()
    src = sg.tensors[sg.outputs[0]]
    _set(pre, shape=list(src.shape), type=src.type, buffer=0, name="probs/pre",
         quantization=src.quantization)
    sg.tensors.append(pre)
    sg.operators[8].outputs[0] = len(sg.tensors) - 1
    op = schema.OperatorT()
    _set(op, opcodeIndex=code, inputs=[len(sg.tensors) - 1], outputs=[sg.outputs[0]])
    sg.operators.append(op)

  data = _mutated(add_identity)
  with pytest.raises(mc.ModelCheckError, match="unsupported custom op 'TEST_ID'"):
    mc.check_model(data)
  mc.check_model(data, host_ops={"TEST_ID"})


def test_artifact_load_validates(tmp_path):
  path = tmp_path / "bad.tflite"
  path.write_bytes(_mutated(RULES["add_ratio"][0]))
  with pytest.raises(mc.ModelCheckError, match=re.escape(str(path)) + r": operator 3"):
    Artifact.load(str(path))


def test_firmware_export_validates_before_any_work(tmp_path):
  from forge_tflm.deploy.export import export_firmware

  path = tmp_path / "bad.tflite"
  path.write_bytes(_mutated(RULES["input_index_-2"][0]))
  with pytest.raises(mc.ModelCheckError, match=r"operator 3 \(ADD\): input 1 is tensor"
                     r" index -2"):
    export_firmware(str(path), str(tmp_path / "out"), data_dir=str(tmp_path / "none"))
  assert not (tmp_path / "out").exists()


def test_litert_errors_after_validation_are_one_line():
  """A valid model LiteRT still refuses at another batch size (RESHAPE to a fixed
  [1, 8]): one ValueError line naming the segment's operators."""
  def fixed_reshape(m, sg):
    _set(_buffer_of(m, sg, "reshape/shape"),
         data=np.frombuffer(np.array([1, 8], np.int32).tobytes(), np.uint8))

  seg = SegmentedModel(_mutated(fixed_reshape), source="fixed.tflite")
  seg.run(np.zeros((1,) + seg.input_shape, np.int8))
  with pytest.raises(ValueError) as e:
    seg.run(np.zeros((2,) + seg.input_shape, np.int8))
  msg = str(e.value)
  assert "\n" not in msg and re.match(r"fixed.tflite: LiteRT rejected operators 2-6"
                                      r" \(DEPTHWISE_CONV_2D, .*RESHAPE\): ", msg), msg


def test_optional_input_stays_optional_in_segments():
  """-1 (an optional input left out), and only -1, reaches LiteRT as -1: a
  FULLY_CONNECTED without bias runs in optimized mode (in a LiteRT segment)."""
  def no_fc_bias(m, sg):
    sg.operators[7].inputs[2] = -1

  seg = SegmentedModel(_mutated(no_fc_bias), "optimized")
  x = np.random.default_rng(1).integers(-128, 128, (3, 8, 8, 3)).astype(np.int8)
  assert seg.run(x).shape == (3, 10)
  fc_inputs = []
  for kind, step in seg._steps:
    if kind == "segment":
      m = tg.load_model(step.model_bytes)
      fc_inputs += [list(op.inputs) for op in m.subgraphs[0].operators
                    if tg.op_name(m, op) == "FULLY_CONNECTED"]
  assert len(fc_inputs) == 1 and fc_inputs[0][2] == -1
