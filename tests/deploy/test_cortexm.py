"""The application core on Cortex-M (qemu-system-arm) matches the host evaluator.

Builds esp32s3_app/cortexm with arm-none-eabi-gcc against the third-party snapshots
(forge_tflm.deploy.targets builds and runs it): TFLite-Micro 90b983c with its
kernels/cmsis_nn/ adapters over CMSIS-NN 4ab83cc (CMSIS_6 core headers) plus the FORGE
op, for three boards:

  an386  qemu mps2-an386, Cortex-M4F (-mcpu=cortex-m4 -mfpu=fpv4-sp-d16
         -mfloat-abi=hard): CMSIS-NN's DSP path
  an547  qemu mps3-an547, Cortex-M55 (-mcpu=cortex-m55): CMSIS-NN's Helium (MVE) path
  an385  qemu mps2-an385, Cortex-M3 without FPU (-mfloat-abi=soft): CMSIS-NN's C
         path; the integer artifact runs on FORGE built for it alone
         (FORGE_ARITH=int), whose link has no soft-float call from FORGE's objects

The model and the int8 images (gaussian_noise-5 CIFAR-10 test images, the evaluator's
--limit=200 --seed=0 subset in ordering 0) are compiled in as C arrays written at test
time into the build cache (forge_tflm.deploy.write_c_arrays). Each ELF runs under
`qemu-system-arm -icount shift=0` with FORGE adapting at batch 1; its output lines
are parsed (forge_tflm.deploy.parse_app_output) and compared image by image with
forge_tflm.deploy.expected_outputs (the evaluator at batch 1, reference kernels), for
the bundled ResNet-20 converted four ways (FORGE at 21 sites, at 3 sites, at 21
sites with the integer arithmetic (--arithmetic=int), plain int8 control), with the
convention of tests/deploy/test_host_parity.py:

  - every op's output, FORGE ops and the final FULLY_CONNECTED (the logits)
    included, and every FORGE op's float32 state after every image must be
    bit-identical (the evaluator's reference mode is TFLM's arithmetic,
    forge_tflm.runtime.tflm_kernels; CMSIS-NN requantizes the same way).

Compared per artifact: all 200 images on the Cortex-M4F; with --runslow also the first
20 on the Cortex-M55 (its QEMU runs take ~0.75 s per image) and all 200 on the Cortex-M3
(each a further cold ARM build; FORGE's Helium variant is checked in CI by
tests/custom_ops/test_cortexm_variants.py); FORGE_TFLM_CORTEXM_IMAGES=N sets N for all.
A cost test checks the
SysTick instruction clock (calibration, deterministic per-op counts) and the arena
sizes; benchmarks/bench_mcu_cost.py reports the counts.

Skips (with the reason) without arm-none-eabi-gcc + newlib, qemu-system-arm, the
third-party snapshots or the dataset. Objects live in run-firmware's build folder
(forge_tflm.deploy.targets.build_dir("cortexm-<board>")). The Cortex-M55's and
Cortex-M3's tests (parity, cost, export-firmware, the M3's FORGE_ARITH=int link check)
carry the slow mark: each board's build alone is 72-97 s on 2 cores, cold.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import re
import subprocess
import time

import numpy as np
import pytest

from forge_tflm.artifact import Artifact
from forge_tflm.deploy import firmware
from forge_tflm.deploy.targets import (BOARDS, DATA_DIR, FPU_LESS, MODEL,  # noqa: F401
                                       STREAM_LIMIT, artifact_paths, build_dir, forge_arith,
                                       gen_dir_for, plain_resnet20, run_console)
from forge_tflm.deploy.targets import build_cortexm_elf as build_elf
from forge_tflm.deploy.targets import cortexm_make_args
from forge_tflm.deploy.targets import cortexm_qemu_command as qemu_command
from forge_tflm.deploy.targets import make_cortexm as make
from forge_tflm.deploy.targets import run_cortexm as run_qemu
from forge_tflm.deploy.toolchains import ToolMissing
from tests.deploy.parity import check_parity

# forge_int: 21 sites with the integer arithmetic (convert --arithmetic=int).
ARTIFACTS = ("forge_all", "forge_3", "plain", "forge_int")
# Images compared per artifact: all 200 on the Cortex-M4F and the Cortex-M3; 20 on the
# Cortex-M55, whose QEMU runs take ~0.75 s per image (the M55's 200 also matched,
# session 9: 200/200 on every artifact; run them with FORGE_TFLM_CORTEXM_IMAGES=200).
_ENV_IMAGES = os.environ.get("FORGE_TFLM_CORTEXM_IMAGES")
BOARD_IMAGES = {b: int(_ENV_IMAGES) if _ENV_IMAGES else n
                for b, n in (("an386", STREAM_LIMIT), ("an547", 20), ("an385", STREAM_LIMIT))}
# The boards whose tests carry the slow mark (a cold build each, outside CI's budget;
# FORGE's Helium variant stays in CI: tests/custom_ops/test_cortexm_variants.py).
SLOW_BOARDS = {"an385", "an547"}
TIMINGS: dict[str, float] = {}


# ------------------------------------------------------------ tools, helpers

def missing_tools() -> str | None:
  """Why the boards cannot be built or run here (tool chain, emulator, snapshots)."""
  return firmware.missing_tools("cortex-m4f")


@contextlib.contextmanager
def _timed(key):
  t0 = time.time()
  yield
  TIMINGS[key] = round(TIMINGS.get(key, 0.0) + time.time() - t0, 1)


def _make_args(board: str) -> list[str]:
  """The board's Make arguments with its build folder (test_esp32s3_project reads what
  they compile)."""
  try:
    return [f"BUILD_DIR={build_dir(f'cortexm-{board}')}"] + cortexm_make_args(board)
  except ToolMissing as e:  # a snapshot
    pytest.skip(str(e))


# ------------------------------------------------------------------ fixtures

@pytest.fixture(scope="session")
def tools():
  why = missing_tools()
  if why:
    pytest.skip(why)


def board_params(boards=BOARDS):
  """pytest parameters for `boards`, the slow ones marked slow."""
  return [pytest.param(b, marks=pytest.mark.slow) if b in SLOW_BOARDS else b
          for b in sorted(boards)]


@pytest.fixture(scope="session")
def libs(tools, request) -> None:
  """The boards' object libraries (the cold build), one board per make -j2; the slow
  boards only with --runslow."""
  slow = request.config.getoption("--runslow")
  with _timed("build_libs"):
    for board in BOARDS:
      if slow or board not in SLOW_BOARDS:
        make(board, ["lib"])


@pytest.fixture(scope="session")
def artifacts(tools) -> dict[str, str]:
  if not os.path.isdir(DATA_DIR):
    pytest.skip(f"needs CIFAR-10 at {DATA_DIR}")
  with _timed("convert"):
    return artifact_paths()


@pytest.fixture(scope="session")
def stream(tools, tmp_path_factory):
  from forge_tflm import deploy

  if not os.path.isdir(DATA_DIR):
    pytest.skip(f"needs CIFAR-10 at {DATA_DIR}")
  return deploy.corrupted_stream(DATA_DIR, "gaussian_noise", 5, limit=STREAM_LIMIT,
                                 cache_dir=str(tmp_path_factory.getbasetemp() / "corr"))


class _Runs:
  """(n images, board) -> {artifact: (AppRun, ExpectedOutputs, calib)}, computed once
  per (n, board); the artifacts' qemu runs go two at a time."""

  def __init__(self, artifacts, stream):
    self.artifacts, self.stream, self.cache, self.expected = artifacts, stream, {}, {}

  def get(self, n: int, board: str):
    if (n, board) in self.cache:
      return self.cache[(n, board)]
    from forge_tflm import deploy

    elfs = {}
    for name, path in self.artifacts.items():
      x = deploy.model_input(path, self.stream.images[:n])
      if (n, name) not in self.expected:
        with _timed(f"expected_{n}"):
          self.expected[(n, name)] = deploy.expected_outputs(path, x, trace="all")
      with _timed(f"gen_link_{n}"):
        elfs[name] = build_elf(board, gen_dir_for(path, x, name),
                               arith=forge_arith(board, name))

    def run(name):
      t0 = time.time()
      out, calib = run_qemu(board, elfs[name], "--trace=all")
      return name, out, calib, time.time() - t0

    out = {}
    with _timed(f"qemu_{n}_{board}"), concurrent.futures.ThreadPoolExecutor(2) as pool:
      for name, text, calib, secs in pool.map(run, sorted(elfs)):
        TIMINGS[f"qemu_{n}_{board}_{name}"] = round(secs, 1)
        out[name] = (deploy.parse_app_output(text), self.expected[(n, name)], calib)
    self.cache[(n, board)] = out
    return out


@pytest.fixture(scope="session")
def runs(libs, artifacts, stream):
  return _Runs(artifacts, stream)


# --------------------------------------------------------------------- tests

def _check_parity(runs, artifacts, board, name, n):
  run, exp, calib = runs.get(n, board)[name]
  label = f"{board} ({BOARDS[board][1]})/{name}"
  identical = check_parity(label, run, exp)
  assert np.array_equal(run.predictions, np.argmax(run.logits, axis=1))
  n_forge = {"forge_all": 21, "forge_3": 3, "plain": 0, "forge_int": 21}[name]
  assert len(run.forge_ops) == n_forge
  assert int(calib["instructions_per_tick_x1000"]) == BOARDS[board][2], calib
  assert [c["calls"] for c in run.cost] == [n] * len(run.ops)
  print(f"\n{label}: {n} images, {identical}/{n} identical logits, every op before the "
        f"final FC and every FORGE state bit-identical; arena_used={run.mem['arena_used']} "
        f"forge_persistent={run.mem['forge_persistent']}; timings {TIMINGS}")


@pytest.mark.parametrize("board", board_params())
@pytest.mark.parametrize("name", ARTIFACTS)
def test_cortexm_matches_evaluator(runs, artifacts, board, name):
  _check_parity(runs, artifacts, board, name, BOARD_IMAGES[board])


@pytest.mark.parametrize("board", board_params())
def test_cortexm_instruction_clock_and_arena(libs, artifacts, stream, board):
  """trace=none timing runs: the SysTick clock counts instructions (calibrated ratio,
  identical per-op counts image after image for the input-independent ops), the
  per-op costs add up to the inference, FORGE's share is a few percent, and FORGE
  grows the 32-bit arena by what the manifest says: its state (8 B per channel), its
  op data and TFLM's node bookkeeping, and no activation memory."""
  from forge_tflm import deploy

  results = {}
  for name in ("forge_all", "plain"):
    x = deploy.model_input(artifacts[name], stream.images[:3])
    elf = build_elf(board, gen_dir_for(artifacts[name], x, name))
    text, calib = run_qemu(board, elf, "--trace=none")
    run = deploy.parse_app_output(text)
    assert run.ok and len(run.ticks) == 3, text[-2000:]
    assert int(calib["instructions_per_tick_x1000"]) == BOARDS[board][2], calib
    assert run.header["trace"] == "none" and run.clock_hz == 10**9
    per_op = sum(c["ticks"] for c in run.cost)
    total = int(run.done["ticks"])
    # Per-op counts cover the inference up to the interpreter's own loop (< 1%).
    assert 0.98 * total < per_op <= total, (per_op, total)
    # Deterministic: the images cost the same to within data-dependent branches.
    assert np.ptp(run.ticks) < 0.001 * np.mean(run.ticks), run.ticks
    results[name] = run
  forge, plain = results["forge_all"], results["plain"]
  share = forge.cost_type["FORGE_RECALIB"]["ticks"] / int(forge.done["ticks"])
  assert 0.01 < share < 0.4, share
  grow = forge.mem["arena_used"] - plain.mem["arena_used"]
  memory = Artifact.load(artifacts["forge_all"]).manifest.memory_json()
  assert forge.mem["states"] == 21, forge.mem
  assert forge.mem["forge_state"] == memory["state_bytes_sram"] == 6272, forge.mem
  assert (forge.mem["forge_persistent"] - forge.mem["forge_state"]
          == memory["op_data_bytes_32bit"]), (forge.mem, memory)
  # The manifest's arena figure is exact up to the alignment of TFLM's node and
  # eval-tensor arrays (16 B each); no non-persistent (activation) bytes are added.
  assert abs(grow - memory["arena_added_bytes_32bit"]) < 32, (grow, memory)
  print(f"\n{board}: {int(np.mean(forge.ticks)):,} instructions/inference with FORGE "
        f"(21 sites), FORGE {share:.1%}; plain {int(np.mean(plain.ticks)):,}; arena_used "
        f"{forge.mem['arena_used']:,} B with FORGE vs {plain.mem['arena_used']:,} B plain")


@pytest.mark.parametrize("board,name", [
    pytest.param(b, n, marks=[pytest.mark.slow] if b in SLOW_BOARDS else [])
    for b, n in [(b, "forge_all") for b in sorted(BOARDS)]
    + [("an385", "forge_int"), ("an386", "forge_int")]])
def test_export_firmware_runs_bit_exact_on_cortexm(libs, artifacts, tmp_path, board, name):
  """What a user ships: `forge_tflm export-firmware` output linked into the board's
  ELF, run under QEMU, and `forge_tflm verify-device` on its log: bit-exact (logits,
  each FORGE op's output and state), exit status 0. The integer artifact on the
  Cortex-M3 runs on FORGE built for it alone (FORGE_ARITH=int)."""
  from forge_tflm.cli.main import main as cli

  gen = tmp_path / "generated"
  with pytest.MonkeyPatch.context() as mp:
    if "FORGE_TFLM_CACHE" not in os.environ:
      mp.setenv("FORGE_TFLM_CACHE", str(tmp_path / "cache"))
    assert cli(["forge_tflm", "export-firmware", artifacts[name],
                f"--data_dir={DATA_DIR}", "--images=4", "--corruption=fog", "--seed=3",
                f"--output_dir={gen}"]) == 0
  elf = build_elf(board, str(gen), arith=forge_arith(board, name))
  text, _ = run_qemu(board, elf, "--trace=forge")
  (tmp_path / "qemu.log").write_text(text)
  assert cli(["forge_tflm", "verify-device", str(tmp_path / "qemu.log"),
              f"--expected={gen}"]) == 0, text[-2000:]


@pytest.mark.parametrize("order", ["shuffled", "sorted"])
def test_export_firmware_gated_runs_bit_exact_on_cortexm(libs, artifacts, tmp_path, order):
  """export-firmware --mode=gated -> the Cortex-M4F with --gate -> verify-device: every
  image's path (source / adapt / adapt_safe), logits, FORGE outputs and states and
  every gate decision identical to the evaluator, which drives the same controller C
  code. 56 images, probe 16, period 40: two decisions. Shuffled with the defaults;
  sorted by class (--label_order=sorted) with every probe deciding "on" (delta -1),
  where the label-correlation detector must flag the stream, so that the adapting
  path runs the op's adapt_safe mode on the device."""
  from forge_tflm import deploy
  from forge_tflm.cli.main import main as cli
  from forge_tflm.deploy.export import export_firmware, load_expected
  from forge_tflm.evaluation.field_streams import LabelOrder
  from forge_tflm.evaluation.gate import GateConfig

  gen, images = tmp_path / "gen_gated", 56
  gate = GateConfig(probe_images=16, period=40, delta=-1.0 if order == "sorted" else None)
  with pytest.MonkeyPatch.context() as mp:
    if "FORGE_TFLM_CACHE" not in os.environ:
      mp.setenv("FORGE_TFLM_CACHE", str(tmp_path / "cache"))
    export_firmware(artifacts["forge_all"], str(gen), data_dir=DATA_DIR, images=images,
                    mode="gated", gate=gate, label_order=LabelOrder(order, None, 1))
  decisions = load_expected(str(gen))["gate"]["decisions"]
  assert any(d["correlated"] for d in decisions) is (order == "sorted"), decisions
  assert order == "shuffled" or all(d["on"] for d in decisions), decisions
  text, _ = run_qemu("an386", build_elf("an386", str(gen)), "--trace=forge --gate")
  run = deploy.parse_app_output(text)
  assert run.ok and run.header["mode"] == "gated", text[-2000:]
  # Two periodic decisions, as many as the evaluator took.
  assert len(run.paths) == images and len(run.gate_decisions) == len(decisions) >= 2, \
      text[-2000:]
  (tmp_path / "gated.log").write_text(text)
  assert cli(["forge_tflm", "verify-device", str(tmp_path / "gated.log"),
              f"--expected={gen}"]) == 0, text[-2000:]


def test_gate_without_exported_settings_is_refused(libs, artifacts, stream):
  """Data written without export-firmware's gate settings: --gate is one error line."""
  from forge_tflm import deploy

  path = artifacts["forge_all"]
  x = deploy.model_input(path, stream.images[:1])
  elf = build_elf("an386", gen_dir_for(path, x, "forge_all"))
  r, text = run_console(lambda out: qemu_command("an386", elf, out, "--gate"), elf, 600)
  assert r.returncode != 0 and "error what=gate_settings" in text, text[-2000:]


# Soft-float and libm routines a float operation compiles to without an FPU (libgcc's
# __aeabi_f*/__aeabi_d*, conversions, the GCC names) and sqrt.
SOFT_FLOAT = re.compile(r"^(__aeabi_(f|d|u?[il]2[fd])|__\w*(sf|df)|sqrtf?$)")


def forge_soft_float_calls(elf: str) -> dict[str, set[str]]:
  """FORGE's code in a linked ELF -> the soft-float routines it calls: the input
  sections the map file places from FORGE's objects (forge/ or forge_int/ of the
  build folder), disassembled, their direct calls and branches read."""
  with open(elf + ".map") as f:
    sections = [(int(a, 16), int(n, 16), p.rsplit("/", 1)[-1]) for _, a, n, p in re.findall(
        r"^ (\.text\S*)\s+(0x[0-9a-f]+)\s+(0x[0-9a-f]+)\s+(\S+/forge(?:_int)?/forge_recalib"
        r"\w*\.o)$", f.read(), re.M) if int(n, 16)]
  assert sections, f"no FORGE code found in {elf}.map"
  text = subprocess.run(["arm-none-eabi-objdump", "-d", elf], check=True,
                        capture_output=True, text=True).stdout
  calls: dict[str, set[str]] = {}
  for addr, target in re.findall(r"^\s*([0-9a-f]+):.*\t(?:bl|blx|b|b\.w)\s+[0-9a-f]+ <([^>+]+)",
                                 text, re.M):
    a = int(addr, 16)
    for start, size, obj in sections:
      if start <= a < start + size and SOFT_FLOAT.match(target):
        calls.setdefault(obj, set()).add(target)
  return calls


@pytest.mark.slow
def test_cortexm3_int_build_links_no_soft_float_from_forge(libs, artifacts, stream):
  """The Cortex-M3 firmware with FORGE built for the integer arithmetic
  (FORGE_ARITH=int) calls no soft-float routine from FORGE's objects (options
  parsing, Prepare and Eval included); the default build, whose float op runs in
  soft-float there, does (the check sees calls when there are some)."""
  from forge_tflm import deploy

  x = deploy.model_input(artifacts["forge_int"], stream.images[:1])
  gen = gen_dir_for(artifacts["forge_int"], x, "forge_int")
  int_calls = forge_soft_float_calls(build_elf("an385", gen, arith="int"))
  assert not int_calls, f"FORGE_ARITH=int: FORGE calls soft-float: {int_calls}"
  any_calls = forge_soft_float_calls(build_elf("an385", gen))
  assert "__aeabi_fmul" in any_calls.get("forge_recalib.o", set()), any_calls
