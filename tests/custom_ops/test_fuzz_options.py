"""Fuzzes FORGE_RECALIB option parsing + validation + every C path using the options.

Builds custom_ops/forge_recalib/fuzz/forge_recalib_options_fuzz.cc as a
libFuzzer target with AddressSanitizer+UBSan when clang has libFuzzer,
otherwise with g++ -fsanitize=address,undefined and the harness's own
deterministic mutation driver; runs >= 100,000 executions from a seed corpus
covering every option field (encode_options and the raw flexbuffers builder).
The harness, with FORGE_RECALIB_FUZZ_PRINT=1, cross-checks the C++ parser
against forge_tflm.ops.decode_options: on the semantic cases here and on
CROSSCHECK_BUFFERS generated buffers (forge_tflm/testing/options_crosscheck.py;
benchmarks/options_crosscheck.py runs 1,000,000).

Needs flatbuffers headers (flexbuffers.h): $FLATBUFFERS_INCLUDE_DIR,
$TFLM_THIRD_PARTY_DIR/flatbuffers/include, the esp-tflite-micro snapshot in
../shared/third_party (the device's flatbuffers), or /usr/include (Debian
package libflatbuffers-dev). Skips, saying which, if no compiler or headers.
"""

import os
import shutil
import sys

import pytest
from flatbuffers import flexbuffers

from forge_tflm import ops
from forge_tflm.testing import options_crosscheck as oc
from tests.conftest import fuzz_slice

FUZZ_RUNS = fuzz_slice(100_000)
CROSSCHECK_BUFFERS = fuzz_slice(50_000)
_run = oc.nice


def _links(cxx, flags, tmp_path):
  probe = tmp_path / "probe.cc"
  probe.write_text('extern "C" int LLVMFuzzerTestOneInput(const unsigned char*,'
                   ' unsigned long) { return 0; }\n')
  return _run([cxx, *flags, str(probe), "-o", str(tmp_path / "probe")]).returncode == 0


def _include():
  inc = oc.flatbuffers_include()
  if inc is None:
    pytest.skip("flatbuffers/flexbuffers.h not found (install libflatbuffers-dev "
                "or set FLATBUFFERS_INCLUDE_DIR / TFLM_THIRD_PARTY_DIR)")
  return inc


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
  """(binary, kind) with kind 'libfuzzer' or 'driver'."""
  inc = _include()
  tmp = tmp_path_factory.mktemp("fuzz")
  clang, clangxx = shutil.which("clang"), shutil.which("clang++")
  # FORGE_RECALIB_FUZZ_TOOLCHAIN=gcc forces the g++ + driver build.
  if os.environ.get("FORGE_RECALIB_FUZZ_TOOLCHAIN") == "gcc":
    clang = clangxx = None
  if clang and clangxx and _links(clangxx, ["-fsanitize=fuzzer,address,undefined"], tmp):
    cc, cxx, kind, extra = clang, clangxx, "libfuzzer", ["-fsanitize=fuzzer"]
  elif oc.compilers_available():
    cc, cxx, kind = "gcc", "g++", "driver"
    extra = ["-DFORGE_RECALIB_FUZZ_DRIVER"]
  else:
    pytest.skip("no C/C++ compiler (clang or gcc) on PATH")
  binary, err = oc.build(cc, cxx, extra, inc, str(tmp), f"fuzz_{kind}")
  if binary is None and "sanitize" in err:
    pytest.skip(f"{cxx} cannot link sanitizers: {err[-300:]}")
  assert binary is not None, err
  return binary, kind


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
  """The g++ driver build (its -stream input runs the generated buffers)."""
  inc = _include()
  if not oc.compilers_available():
    pytest.skip("no gcc/g++ on PATH")
  binary, err = oc.build_driver(inc, str(tmp_path_factory.mktemp("driver")))
  if binary is None and "sanitize" in err:
    pytest.skip(f"g++ cannot link sanitizers: {err[-300:]}")
  assert binary is not None, err
  return binary


def _raw(pairs, float_width=None) -> bytes:
  """Map built with the raw builder: any key/value types, even invalid ones."""
  fbb = flexbuffers.Builder()
  with fbb.Map():
    for key, value in pairs:
      fbb.Key(key)
      if isinstance(value, bool):
        fbb.Bool(value)
      elif isinstance(value, int):
        fbb.Int(value)
      elif isinstance(value, float):
        fbb.Float(value, byte_width=float_width or 0)
      elif isinstance(value, str):
        fbb.String(value)
      elif isinstance(value, bytes):
        fbb.Blob(value)
      elif isinstance(value, list):
        fbb.VectorFromElements(value)
      elif value is None:
        fbb.Null()
  return bytes(fbb.Finish())


def _valid_options():
  return oc.seed_options()


def _semantic_cases():
  """(bytes, expect_ok) maps whose validity both parsers must agree on."""
  cases = [(ops.encode_options(o), True) for o in _valid_options()]
  good = [("eps", 1e-5), ("activation", "relu"), ("variance", "batch")]
  cases += [
      (_raw([("momentum", 0.25)]), True),
      (_raw([("window", 10)]), True),
      (_raw([("momentum", 0.1), ("eps", 0.001)], float_width=8), True),
      (_raw([("momentum", 0.1), ("eps", 0.001)], float_width=4), True),
      (_raw([("momentum", 0.1), ("window", 3)]), False),
      (_raw(good), False),
      (_raw([]), False),
      (_raw([("momentum", 1)]), False),  # int, not float
      (_raw([("momentum", True)]), False),
      (_raw([("momentum", "0.1")]), False),
      (_raw([("momentum", float("nan"))]), False),
      (_raw([("momentum", float("inf"))]), False),
      (_raw([("momentum", -0.1)]), False),
      (_raw([("momentum", 1.5)]), False),
      (_raw([("momentum", 1e300)], float_width=8), False),
      (_raw([("window", 0)]), False),
      (_raw([("window", -5)]), False),
      (_raw([("window", 2**31)]), False),
      (_raw([("window", 2**63 - 1)]), False),
      (_raw([("window", 3.0)]), False),
      (_raw([("window", True)]), False),
      (_raw([("momentum", 0.1), ("eps", 0.0)]), False),
      (_raw([("momentum", 0.1), ("eps", -1e-5)]), False),
      (_raw([("momentum", 0.1), ("eps", float("nan"))]), False),
      (_raw([("momentum", 0.1), ("eps", float("-inf"))]), False),
      (_raw([("momentum", 0.1), ("eps", 1e-50)]), False),  # 0 as float32
      (_raw([("momentum", 0.1), ("eps", 3.5e38)], float_width=8), False),
      (_raw([("momentum", 0.1), ("eps", 1)]), False),
      (_raw([("momentum", 0.1), ("activation", "relu1")]), False),
      (_raw([("momentum", 0.1), ("activation", "RELU")]), False),
      (_raw([("momentum", 0.1), ("activation", "")]), False),
      (_raw([("momentum", 0.1), ("activation", 1)]), False),
      (_raw([("momentum", 0.1), ("variance", "train")]), False),
      (_raw([("momentum", 0.1), ("variance", None)]), False),
      (_raw([("momentum", 0.1), ("momentun", 0.1)]), False),  # typo key
      (_raw([("momentum", 0.1), ("extra", [1, 2, 3])]), False),
      (_raw([("momentum", 0.1), ("blob", b"\x00\x01")]), False),
      (_raw([("momentum", [0.1])]), False),
      (bytes(flexbuffers.Dumps([0.1, 2])), False),  # root not a map
      (bytes(flexbuffers.Dumps(0.1)), False),
      (bytes(flexbuffers.Dumps("momentum")), False),
      (b"", False),
      (b"\x00", False),
      (b"\x00" * 600, False),
      # label_safe: its bounds and type; the removed class options are unknown keys.
      (_raw([("window", 8), ("label_safe", 1)]), True),
      (_raw([("window", 8), ("label_safe", 0)]), True),
      (_raw([("window", 8), ("label_safe", 2)]), False),
      (_raw([("window", 8), ("label_safe", 1.0)]), False),
      (_raw([("window", 8), ("classes", 10)]), False),
      (_raw([("window", 8), ("class_margin", 3)]), False),
  ]
  # Issue 34: buffers the Python decoder once accepted and the C++ parser refuses.
  cases += [(oc.regression_buffer(what), False) for what in sorted(oc.REGRESSIONS)]
  return cases


def _write_corpus(directory):
  os.makedirs(directory, exist_ok=True)
  for i, (data, _) in enumerate(_semantic_cases()):
    with open(os.path.join(directory, f"seed_{i:03d}"), "wb") as f:
      f.write(data)


def _fuzz_command(binary, kind, corpus, runs):
  cmd = [binary, f"-runs={runs}", "-seed=20240611", str(corpus)]
  if kind == "libfuzzer":
    # Crash and out-of-memory inputs beside the corpus, not in the working directory.
    cmd[1:1] = [f"-artifact_prefix={os.path.dirname(str(corpus))}{os.sep}"]
    # libFuzzer's RSS limit reads getrusage's ru_maxrss, which Linux carries across
    # exec: a fuzzer started by a pytest process holding 2+ GB (TensorFlow loaded by
    # earlier tests) saw the parent's peak and stopped as "out-of-memory" at once.
    # The limit on any one allocation stays.
    cmd[1:1] = ["-max_len=1024", "-print_final_stats=1", "-rss_limit_mb=0",
                "-malloc_limit_mb=2048"]
  return cmd


def test_fuzz_options_100k_executions(harness, tmp_path):
  binary, kind = harness
  corpus = tmp_path / "corpus"
  _write_corpus(str(corpus))
  r = _run(_fuzz_command(binary, kind, corpus, FUZZ_RUNS), timeout=600)
  assert r.returncode == 0, r.stderr[-4000:]
  assert f"Done {FUZZ_RUNS} runs" in r.stderr, r.stderr[-2000:]
  print(f"{kind} + ASan/UBSan: {FUZZ_RUNS} executions; "
        f"{r.stderr.strip().splitlines()[-1]}")


def test_fuzzer_runs_from_a_parent_holding_more_than_its_memory_limit(harness, tmp_path):
  """The fuzzer's verdict must not depend on how much memory the process that starts
  it holds (ru_maxrss survives exec)."""
  binary, kind = harness
  if kind != "libfuzzer":
    pytest.skip("the driver build has no RSS limit")
  corpus = tmp_path / "corpus"
  _write_corpus(str(corpus))
  # Long enough for libFuzzer's RSS check (once a second) to run a few times.
  cmd = _fuzz_command(binary, kind, corpus, -1) + ["-max_total_time=4"]
  parent = ("import subprocess, sys, numpy\n"
            "held = numpy.ones((2300 << 20) // 8)  # 2.3 GB resident, > 2048 MB\n"
            f"sys.exit(subprocess.run({cmd!r}).returncode)\n")
  r = _run([sys.executable, "-c", parent], timeout=600)
  assert r.returncode == 0, r.stderr[-4000:]


def test_cpp_parser_agrees_with_python_decoder(harness, tmp_path):
  binary, _ = harness
  cases = _semantic_cases()
  # Truncations of a valid buffer: must fail cleanly in both parsers.
  valid = ops.encode_options(ops.RecalibOptions(window=8, activation="relu6"))
  cases += [(valid[:n], False) for n in range(len(valid))]
  paths = []
  for i, (data, _) in enumerate(cases):
    p = tmp_path / f"case_{i:03d}"
    p.write_bytes(data)
    paths.append(str(p))
  r = _run([binary, *paths], env={**os.environ, "FORGE_RECALIB_FUZZ_PRINT": "1"})
  assert r.returncode == 0, r.stderr[-4000:]
  # libFuzzer may run extra inputs (e.g. an empty one): match by input hash.
  by_hash = dict(l.split(" ", 1) for l in r.stdout.splitlines()
                 if l.split(" ")[1:2] in (["OK"], ["ERR"]))
  for data, expect_ok in cases:
    line = by_hash[f"{oc.fnv1a64(data):016x}"]
    py = oc.python_verdict(data)
    assert line.startswith("OK") == expect_ok, (data.hex(), line)
    if expect_ok:
      assert line == py, (data.hex(), line, py)
    else:
      assert py == "ERR", (data.hex(), line, py)


def test_cpp_parser_agrees_with_python_decoder_on_generated_buffers(driver, tmp_path):
  """Every option field, structured maps and byte mutants: same verdicts and values,
  and every C path consuming the options clean under ASan/UBSan."""
  result = oc.crosscheck(driver, CROSSCHECK_BUFFERS, seed=0, work_dir=str(tmp_path))
  assert result.buffers == CROSSCHECK_BUFFERS
  assert result.disagreements == [], result.disagreements[:5]
  # The generator reaches the valid side too (and so the C paths past parsing).
  assert result.both_ok > CROSSCHECK_BUFFERS // 50, result
  print(f"{result.buffers} buffers: {result.both_ok} accepted by both, "
        f"{result.both_err} refused by both; {result.harness_summary}")


def test_encode_decode_round_trip():
  for o in _valid_options():
    assert ops.decode_options(ops.encode_options(o)) == o
