"""The ESP32-S3 variant of the FORGE_RECALIB C core is bit-exact to the ansi core.

Builds custom_ops/forge_recalib/test/esp32s3 (the Cortex-M test's variants_test.c, the
core files with FORGE_RECALIB_ESP32S3, esp32s3_app/esp32s3's startup code and linker
script) with the xtensa-esp32s3-elf toolchain and runs it on QEMU's esp32s3 machine
(both from ../shared/toolchains, tests/third_party.esp32s3_tools), the second core
parked as in tests/deploy/test_esp32s3_qemu.py:

  forge_recalib_s8_esp32s3 (PIE stats pass, scalar-FPU affine and table paths)

with the auto, affine and table paths, compared with forge_recalib_s8_ansi (outputs
and float32 state bytes after every step) on random cases, as
tests/custom_ops/test_cortexm_variants.py does for the Cortex-M variants. A second
run under -icount shift=0 prints instructions per element at the ResNet-20 site
shapes (emulated instructions, not cycles).

Objects go to $FORGE_TFLM_BUILD_CACHE/forge_variants_esp32s3. Skips (with the reason)
without the toolchain/QEMU tarballs or QEMU's runtime libraries.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from forge_tflm.deploy.targets import run_console
from tests import third_party
from tests.conftest import REPO_ROOT
from tests.custom_ops.test_cortexm_variants import CASES

TEST_DIR = os.path.join(REPO_ROOT, "custom_ops", "forge_recalib", "test", "esp32s3")
SHAPES = ("32x32x16", "16x16x32", "8x8x64")


@pytest.fixture(scope="module")
def elf() -> str:
  prefix, why = third_party.esp32s3_tools()
  if prefix is None:
    pytest.skip(why)
  build_dir = os.path.join(third_party.build_cache(), "forge_variants_esp32s3")
  r = subprocess.run(["nice", "make", "-C", TEST_DIR, "-j2", f"PREFIX={prefix}",
                      f"BUILD_DIR={build_dir}"], capture_output=True, text=True)
  if r.returncode != 0:
    raise RuntimeError(f"make failed:\n{r.stdout[-3000:]}{r.stderr[-6000:]}")
  return os.path.join(build_dir, "variants_test.elf")


def run(elf: str, args: str, icount: bool = False) -> tuple[int, str]:
  from tests.deploy import test_esp32s3_qemu as s3

  r, text = run_console(lambda out: s3.qemu_command(elf, out, args, icount), elf, 900)
  return r.returncode, text


def test_esp32s3_variant_bit_exact(elf):
  rc, text = run(elf, f"--cases={CASES}")
  m = re.search(r"^summary board=esp32s3 variant=esp32s3 cases=(\d+) checks=(\d+) "
                r"failures=(\d+) result=(\S+)$", text, re.M)
  fails = [line for line in text.splitlines() if line.startswith("FAIL")]
  assert m and int(m.group(1)) == CASES and int(m.group(2)) > 0, text[-3000:]
  assert m.group(4) == "PASS", "\n".join(fails[:20])
  assert "done result=PASS" in text and rc == 0, text[-3000:]


def bench(elf) -> dict:
  """(variant, path, shape) -> emulated instructions per element, batch 1, adapting."""
  rc, text = run(elf, "--bench", icount=True)
  assert rc == 0 and "done result=PASS" in text, text[-3000:]
  return {m.group(1, 2, 3): float(m.group(4)) for m in re.finditer(
      r"^bench board=esp32s3 variant=(\S+) path=(\S+) shape=(\S+) instructions=\d+ "
      r"per_element=([\d.]+)$", text, re.M)}


def test_esp32s3_variant_fewer_instructions(elf):
  """At each ResNet-20 site shape the S3 variant runs in fewer instructions than
  ansi (auto path for both), and the counts repeat run to run (within a tick)."""
  per, again = bench(elf), bench(elf)
  # Within a CCOUNT tick (25 instructions) per call, not the 10x outliers of an
  # unparked second core.
  assert all(abs(again[k] - v) <= 0.005 * v for k, v in per.items()), (per, again)
  for shape in SHAPES:
    ansi, s3 = per[("ansi", "auto", shape)], per[("esp32s3", "auto", shape)]
    assert 0 < s3 < ansi, (shape, ansi, s3)
  print("\nesp32s3 instructions/element (auto path), ansi -> S3 variant: " + ", ".join(
      f"{s} {per[('ansi', 'auto', s)]:.2f} -> {per[('esp32s3', 'auto', s)]:.2f}"
      for s in SHAPES))
