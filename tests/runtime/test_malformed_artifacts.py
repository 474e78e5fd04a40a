"""Issue 20's crashes, each as an artifact run through the evaluator's loading path.

`forge_tflm eval` aborted (exit 134) on an artifact whose ADD output scale is 1e-30,
segfaulted (139) on an operator input index of -2 (the segmentation rewrote every
negative index to -1, "optional") and hung on a huge input shape; a FORGE op with an
INT8 beta was accepted on the host (the device rejects it). Each artifact here runs in
a child process (forge_tflm/testing/artifact_fuzz.py --load: Artifact.load,
SegmentedModel.from_artifact, one inference), so a crash fails the test instead of
killing pytest; each must now end in one line naming the file, operator and tensor.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from ai_edge_litert import schema_py_generated as schema

from forge_tflm import tflite_graph as tg
from forge_tflm.testing import artifact_fuzz as af
from tests.conftest import REPO_ROOT

ADD_OP = 3       # Operator indices in artifact_fuzz.seed_model().
FORGE_OP = 1
RESHAPE_OP = 6


def _seed(size=8):
  return tg.load_model(af.seed_model(size=size))


def _tensor_of(model, name):
  sg = model.subgraphs[0]
  return next(i for i, t in enumerate(sg.tensors) if tg.tensor_name(t) == name)


def add_output_scale(scale, size=8):
  m = _seed(size)
  sg = m.subgraphs[0]
  sg.tensors[sg.operators[ADD_OP].outputs[0]].quantization.scale = [scale]
  return tg.save_model(m)


def input_index(op, k, index, size=8):
  m = _seed(size)
  m.subgraphs[0].operators[op].inputs[k] = index
  return tg.save_model(m)


def huge_input(shape):
  m = _seed()
  sg = m.subgraphs[0]
  sg.tensors[sg.inputs[0]].shape = list(shape)
  return tg.save_model(m)


def int8_beta():
  m = _seed()
  sg = m.subgraphs[0]
  beta = sg.tensors[sg.operators[FORGE_OP].inputs[1]]
  beta.type = schema.TensorType.INT8
  values = np.frombuffer(bytes(np.asarray(m.buffers[beta.buffer].data, np.uint8)),
                         np.float32)
  m.buffers[beta.buffer].data = np.frombuffer(
      np.clip(np.round(values * 100), -128, 127).astype(np.int8).tobytes(), np.uint8)
  return tg.save_model(m)


CASES = {
    # name: (model bytes, kernels, expected message pattern)
    "add_output_scale_1e-30": (
        lambda: add_output_scale(1e-30), "reference",
        r"operator 3 \(ADD\): output 0 \(tensor \d+ 'add'\): quantization scale 1e-30"
        r" is not in \[1e-20, 1e\+20\]"),
    "add_output_scale_1e-9": (  # In the global range, too small for ADD's kernel.
        lambda: add_output_scale(1e-9), "optimized",
        r"operator 3 \(ADD\): output 0 \(tensor \d+ 'add'\) scale 1e-09 is too small"),
    # The segmentation turned -2 into -1: RESHAPE then read a null shape (SIGSEGV).
    "op_input_index_-2": (
        lambda: input_index(RESHAPE_OP, 1, -2), "reference",
        r"operator 6 \(RESHAPE\): input 1 is tensor index -2: neither -1 \(optional\)"),
    "op_input_index_-2_add": (
        lambda: input_index(ADD_OP, 1, -2), "optimized",
        r"operator 3 \(ADD\): input 1 is tensor index -2: neither -1 \(optional\)"),
    "op_input_index_-1_where_required": (  # ADD with an "optional" operand: SIGSEGV.
        lambda: input_index(ADD_OP, 1, -1), "reference",
        r"operator 3 \(ADD\): input 1 is missing \(-1\): ADD needs it"),
    "huge_input_shape": (
        lambda: huge_input([1, 100000, 100000, 3]), "reference",
        r"model input 0 \(tensor 0 'image'\): shape \[1,100000,100000,3\] has more than"
        r" 2\^31 elements|input 0 \(tensor 0 'image'\): shape"),
    "large_input_shape_inconsistent": (  # 50 MB input: the conv no longer fits it.
        lambda: huge_input([1, 4096, 4096, 3]), "reference",
        r"operator 0 \(CONV_2D\): output 0 \(tensor \d+ 'conv0'\) has shape"
        r" \[1,8,8,8\], the op computes \[1,4096,4096,8\]"),
    "forge_int8_beta": (
        int8_beta, "reference",
        r"operator 1 \(FORGE_RECALIB\): beta and gamma_abs .* must be float32, are INT8"
        r" and FLOAT32"),
}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
  """All cases through the loading path, each in its own forked child."""
  d = tmp_path_factory.mktemp("malformed")
  paths, kernels = {}, {}
  for name, (build, kern, _) in CASES.items():
    paths[name] = str(d / f"{name}.tflite")
    kernels.setdefault(kern, []).append(name)
    with open(paths[name], "wb") as f:
      f.write(build())
  out = {}
  for kern, names in kernels.items():
    r = subprocess.run(
        [sys.executable, "-m", "forge_tflm.testing.artifact_fuzz", f"--kernels={kern}",
         "--load", *(paths[n] for n in names)],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=600,
        env=dict(os.environ, PYTHONPATH=REPO_ROOT))
    assert r.returncode == 0, r.stderr[-3000:]
    records = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    for name, rec in zip(names, records):
      out[name] = rec
  return out, paths


@pytest.mark.parametrize("name", sorted(CASES))
def test_rejected_with_one_line_naming_file_operator_and_tensor(results, name):
  recs, paths = results
  rec = recs[name]
  assert rec["outcome"] == "rejected", rec  # Not crash / hang / error.
  msg = rec["message"]
  assert msg.startswith("[validator] "), msg  # Before LiteRT, not by it.
  assert "\n" not in msg
  assert msg[len("[validator] "):].startswith(paths[name] + ": "), msg
  import re
  assert re.search(CASES[name][2], msg), msg
  assert rec["seconds"] < 30, rec  # The huge shape used to hang.


def test_seed_itself_runs(tmp_path):
  path = tmp_path / "seed.tflite"
  path.write_bytes(af.seed_model())
  assert af.load_and_run(str(path), "reference") == ("ok", "")
  assert af.load_and_run(str(path), "optimized") == ("ok", "")


CLI_CASES = {  # 32x32 inputs, as CIFAR-10's images.
    "add_output_scale_1e-30": lambda: add_output_scale(1e-30, size=32),
    "op_input_index_-2": lambda: input_index(RESHAPE_OP, 1, -2, size=32),
}


@pytest.mark.parametrize("name", sorted(CLI_CASES))
def test_eval_cli_exits_1_with_one_line(shared_cifar10, tmp_path, name):
  """The issue's symptom: `forge_tflm eval` exited 134 (abort) and 139 (segfault)."""
  pattern = CASES[name][2]
  artifact = tmp_path / f"{name}.tflite"
  artifact.write_bytes(CLI_CASES[name]())
  r = subprocess.run(
      [sys.executable, "-m", "forge_tflm.cli.main", "eval", f"--artifact={artifact}",
       f"--data_dir={os.path.dirname(shared_cifar10)}", "--methods=source", "--limit=8",
       "--corruptions=gaussian_noise", f"--output_dir={tmp_path / 'out'}"],
      capture_output=True, text=True, cwd=REPO_ROOT, timeout=900)
  assert r.returncode == 1, (r.returncode, r.stderr[-2000:])
  lines = [l for l in r.stderr.splitlines() if l.strip()]
  assert "Traceback" not in r.stderr and lines, r.stderr[-2000:]
  assert lines[-1].startswith(f"forge_tflm eval: error: {artifact}: "), lines[-1]
  import re
  assert re.search(pattern, lines[-1]), lines[-1]
