"""Prepare and option parsing without float operations equal their float versions.

The integer-only paths (FPU-less builds, FORGE_RECALIB_INT_ONLY) compute what the
float code computed: forge_recalib.c's relu6 bound round_half_away(6.0f / s_y) by an
integer emulation of the float32 division, checked for every valid output scale
(all 671,088,641 float32 values in [2^-40, 2^40]); forge_recalib_options.cc's
double -> float32 rounding of a flexbuffer float option, checked against the
conversion on 20 million doubles around the float32 range (ties, subnormals,
FLT_MAX's edge). A host C/C++ harness includes the sources; skips without gcc/g++.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests import third_party
from tests.conftest import REPO_ROOT

SRC = os.path.join(REPO_ROOT, "custom_ops", "forge_recalib", "src")

SIX_HARNESS = r"""
#include <stdio.h>
#include <string.h>
#include "forge_recalib.c"
static int32_t by_float(float s_y) {
  float six = 6.0f / s_y;
  if (!(six < 256.0f)) return -1;
  int32_t i = (int32_t)six;
  return i + (six - (float)i >= 0.5f ? 1 : 0);
}
int main(void) {
  unsigned long bad = 0;
  for (uint32_t b = 0x2B800000u; b <= 0x53800000u; ++b) {
    float f;
    memcpy(&f, &b, 4);
    if (by_float(f) != int_six_over_scale(b) && bad++ < 5) printf("s_y bits %08x\n", b);
  }
  printf("mismatches %lu\n", bad);
  return bad != 0;
}
"""

DOUBLE_HARNESS = r"""
#include "forge_recalib_options.cc"
#include <cfloat>
#include <cstdio>
#include <cstring>
#include <random>
using namespace forge_recalib;
int main() {
  std::mt19937_64 rng(37);
  unsigned long bad = 0;
  for (int i = 0; i < 20000000; ++i) {
    uint64_t d = rng();
    if (i & 1) d = (d & 0x800FFFFFFFFFFFFFull) | (uint64_t(863 + rng() % 320) << 52);
    if (i % 7 == 0) d &= ~((1ull << (rng() % 40)) - 1);
    if (i < 4) d = (uint64_t[]){0x47EFFFFFE0000000ull, 0x47EFFFFFE0000001ull,
                                0x36A0000000000000ull, 0x36A0000000000001ull}[i];
    double v;
    memcpy(&v, &d, 8);
    uint32_t bits = 0, want = 0;
    const bool ok = DoubleBitsToFloat(d, &bits);
    const bool in_range = v >= -double(FLT_MAX) && v <= double(FLT_MAX);
    if (in_range) { float f = float(v); memcpy(&want, &f, 4); }
    if ((ok != in_range || (ok && bits != want)) && bad++ < 5) printf("%016llx\n", (unsigned long long)d);
  }
  printf("mismatches %lu\n", bad);
  return bad != 0;
}
"""


def _run(tmp_path, compiler: str, name: str, code: str, flags: list[str],
         tail: list[str]) -> str:
  """Builds the harness (flags before it, tail after: sources, libraries); runs it."""
  if shutil.which(compiler) is None:
    pytest.skip(f"needs {compiler} (host compiler)")
  src = tmp_path / name
  src.write_text(code)
  exe = str(tmp_path / "harness")
  subprocess.run([compiler, "-O2", "-ffp-contract=off", "-I", SRC, *flags, str(src), *tail,
                  "-o", exe], check=True, capture_output=True, text=True)
  r = subprocess.run([exe], capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stdout
  return r.stdout


def test_relu6_bound_on_integers_equals_float_division(tmp_path):
  out = _run(tmp_path, "gcc", "six.c", SIX_HARNESS, ["-std=c99"],
             [os.path.join(SRC, "forge_recalib_int.c"), "-lm"])
  assert "mismatches 0" in out


def test_float_option_rounding_on_integers_equals_conversion(tmp_path):
  flexbuffers = os.path.join(third_party.snapshot("esp-tflite-micro"), "third_party",
                             "flatbuffers", "include")
  out = _run(tmp_path, "g++", "double.cc", DOUBLE_HARNESS, ["-std=c++17", "-I", flexbuffers],
             ["-x", "c", os.path.join(SRC, "forge_recalib.c"),
              os.path.join(SRC, "forge_recalib_int.c"), "-lm"])
  assert "mismatches 0" in out
