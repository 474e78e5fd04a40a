"""The integer arithmetic's object has no float instruction and no soft-float call.

Compiles custom_ops/forge_recalib/src/forge_recalib_int.c (SPEC "Integer
arithmetic": forge_recalib_s8_int, forge_recalib_int_state_reset, the statistics
pass) alone with arm-none-eabi-gcc for FPU-less cores (Cortex-M0, -M3, soft-float
ABI) and checks that every symbol it needs from elsewhere is an integer helper
(libgcc's 64-bit multiply/shift/divide, count leading zeros, memcpy/memset): no __aeabi_f*/__aeabi_d*,
conversions, sqrtf. A Cortex-M4F hard-float build's disassembly must have no VFP
instruction either. Skips without arm-none-eabi-gcc.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from tests.conftest import REPO_ROOT

SRC = os.path.join(REPO_ROOT, "custom_ops", "forge_recalib", "src")
# Integer helpers an Armv6-M/v7-M build may call (libgcc, libc).
ALLOWED = {"__aeabi_lmul", "__aeabi_ldivmod", "__aeabi_uldivmod", "__aeabi_llsl",
           "__aeabi_llsr", "__aeabi_lasr", "__aeabi_idiv", "__aeabi_uidiv",
           "__aeabi_idivmod", "__aeabi_uidivmod", "__clzsi2", "memcpy", "memset",
           "__aeabi_memcpy", "__aeabi_memcpy4", "__aeabi_memset", "__aeabi_memset4"}
ENTRY_POINTS = {"forge_recalib_s8_int", "forge_recalib_int_state_reset"}
CORES = {"cortex-m0": ["-mcpu=cortex-m0", "-mthumb", "-mfloat-abi=soft"],
         "cortex-m3": ["-mcpu=cortex-m3", "-mthumb", "-mfloat-abi=soft"]}

pytestmark = pytest.mark.skipif(
    shutil.which("arm-none-eabi-gcc") is None or shutil.which("arm-none-eabi-nm") is None,
    reason="arm-none-eabi-gcc not installed (apt package gcc-arm-none-eabi)")


def _compile(tmp_path, name: str, flags: list[str]) -> str:
  obj = str(tmp_path / f"{name}.o")
  subprocess.run(["arm-none-eabi-gcc", *flags, "-O2", "-std=c99", "-Wall", "-Wextra",
                  "-Werror", "-ffp-contract=off", "-I", SRC,
                  "-c", os.path.join(SRC, "forge_recalib_int.c"), "-o", obj],
                 check=True, capture_output=True, text=True)
  return obj


def _symbols(obj: str, *args: str) -> set[str]:
  out = subprocess.run(["arm-none-eabi-nm", *args, obj], check=True,
                       capture_output=True, text=True).stdout
  return {line.split()[-1] for line in out.splitlines() if line.strip()}


@pytest.mark.parametrize("core", sorted(CORES))
def test_int_object_has_no_soft_float_calls(tmp_path, core):
  obj = _compile(tmp_path, core, CORES[core])
  undefined = _symbols(obj, "-u")
  assert undefined <= ALLOWED, f"{core}: calls {sorted(undefined - ALLOWED)}"
  assert not {s for s in undefined if re.search(r"__aeabi_[fd]|2f|2d|sqrt|__.*[sd]f\d",
                                                s)}
  assert ENTRY_POINTS <= _symbols(obj, "--defined-only", "-g")


def test_int_object_has_no_vfp_instructions(tmp_path):
  obj = _compile(tmp_path, "cortex-m4f", ["-mcpu=cortex-m4", "-mthumb",
                                         "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16"])
  text = subprocess.run(["arm-none-eabi-objdump", "-d", obj], check=True,
                        capture_output=True, text=True).stdout
  vfp = [line for line in text.splitlines()
         if re.search(r"\tv(add|sub|mul|div|sqrt|cvt|mov|ldr|str|cmp|neg|abs|fma|push"
                      r"|pop)\S*\s", line)]
  assert not vfp, "\n".join(vfp[:10])
