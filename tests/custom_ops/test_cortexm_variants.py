"""The Cortex-M variants of the FORGE_RECALIB C core are bit-exact to the ansi core.

Builds custom_ops/forge_recalib/test/cortexm (variants_test.c + the core files +
esp32s3_app/cortexm's startup.c and linker scripts) with arm-none-eabi-gcc for both
QEMU boards and runs it under qemu-system-arm:

  an386  mps2-an386, Cortex-M4F: forge_recalib_s8_cortexm (DSP extension)
  an547  mps3-an547, Cortex-M55: forge_recalib_s8_cortexm and forge_recalib_s8_mve

Each variant, with the auto, affine and table paths, is compared with
forge_recalib_s8_ansi (outputs and float32 state bytes after every step) on random
cases; the target prints a `summary ... result=PASS|FAIL` line per variant. A second
run under `-icount shift=0` prints instructions per element at the ResNet-20 site
shapes (checked loosely here; the numbers are in the test folder's README).

Objects go to $FORGE_TFLM_BUILD_CACHE/forge_variants_cortexm/<board>. Skips (with the
reason) without arm-none-eabi-gcc + newlib or qemu-system-arm.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from forge_tflm.deploy.targets import run_console
from tests import third_party
from tests.conftest import REPO_ROOT

TEST_DIR = os.path.join(REPO_ROOT, "custom_ops", "forge_recalib", "test", "cortexm")
BOARDS = {"an386": ("mps2-an386", ["cortexm"]), "an547": ("mps3-an547", ["cortexm", "mve"])}
CASES = int(os.environ.get("FORGE_TFLM_VARIANT_CASES", "400"))


missing_tools = third_party.missing_arm_tools


def build(board: str) -> str:
  build_dir = os.path.join(third_party.build_cache(), "forge_variants_cortexm", board)
  r = subprocess.run(["make", "-C", TEST_DIR, f"BOARD={board}", f"BUILD_DIR={build_dir}"],
                     capture_output=True, text=True)
  if r.returncode != 0:
    raise RuntimeError(f"make BOARD={board} failed:\n{r.stdout[-3000:]}{r.stderr[-6000:]}")
  return os.path.join(build_dir, "variants_test.elf")


def run(board: str, elf: str, args: str, icount: bool = False) -> tuple[int, str]:
  def command(out_file):
    cmd = ["qemu-system-arm", "-M", BOARDS[board][0], "-display", "none", "-serial", "null",
           "-monitor", "none", "-chardev", f"file,id=semihosting,path={out_file}",
           "-semihosting-config", "enable=on,target=native,chardev=semihosting"]
    return cmd + (["-icount", "shift=0"] if icount else []) + ["-kernel", elf, "-append", args]

  r, text = run_console(command, elf, 900)
  return r.returncode, text


@pytest.fixture(scope="module")
def tools():
  why = missing_tools()
  if why:
    pytest.skip(why)


@pytest.mark.parametrize("board", sorted(BOARDS))
def test_variants_bit_exact(tools, board):
  elf = build(board)
  rc, text = run(board, elf, f"--cases={CASES}")
  fails = [l for l in text.splitlines() if l.startswith("FAIL")]
  summaries = {m.group(1): m for m in re.finditer(
      r"^summary board=\S+ variant=(\S+) cases=(\d+) checks=(\d+) failures=(\d+) "
      r"result=(\S+)$", text, re.M)}
  assert sorted(summaries) == sorted(BOARDS[board][1]), text[-3000:]
  for variant, m in summaries.items():
    assert int(m.group(2)) == CASES
    assert int(m.group(3)) > 0
    assert m.group(5) == "PASS", f"{variant} on {board}:\n" + "\n".join(fails[:20])
  assert "done result=PASS" in text and rc == 0, text[-3000:]


@pytest.mark.parametrize("board", sorted(BOARDS))
def test_variants_fewer_instructions(tools, board):
  """At each ResNet-20 site shape (batch 1, adapting) the best variant on the board
  runs in fewer instructions than ansi (auto path for both)."""
  elf = build(board)
  rc, text = run(board, elf, "--bench", icount=True)
  assert rc == 0 and "done result=PASS" in text, text[-3000:]
  per = {}
  for m in re.finditer(r"^bench board=\S+ variant=(\S+) path=(\S+) shape=(\S+) "
                       r"instructions=(\d+) per_element=([\d.]+)$", text, re.M):
    per[(m.group(1), m.group(2), m.group(3))] = float(m.group(5))
  best = BOARDS[board][1][-1]
  for shape in ("32x32x16", "16x16x32", "8x8x64"):
    ansi, var = per[("ansi", "auto", shape)], per[(best, "auto", shape)]
    assert 0 < var < ansi, (shape, ansi, var, text)
    # Arithmetic int (path=int): the target's stats pass and I8 loop.
    ansi, var = per[("ansi", "int", shape)], per[(best, "int", shape)]
    assert 0 < var < ansi, (shape, "int", ansi, var, text)
