"""ESP-NN's S3 depthwise kernel writes past the scratch its size function asks for, and
the app's guard requests what it writes (issue 49;
docs/decisions/esp-nn-s3-depthwise-scratch.md).

Builds esp32s3_app/esp32s3/dw_scratch_check.c (Makefile goal `dw-check`, in the same
build folder and library as test_esp32s3_qemu.py) and runs it under the esp32s3 QEMU
machine: per depthwise shape (every MobileNetV2-0.5 one, and shapes around ESP-NN's
40 KB pad/tile threshold and its other dispatch paths) the S3 kernel runs with exactly
esp_nn_get_depthwise_conv_scratch_size's bytes and then with the guard's
(forge_esp_nn_dw_scratch_bytes, linked from the app's own forge_app.o: the code the
app's DEPTHWISE_CONV_2D Prepare calls), each followed by a canary region, and its output
is compared with ESP-NN's _ansi kernel. Skips without the toolchain/QEMU tarballs or the
snapshots (as test_esp32s3_qemu.py).
"""

from __future__ import annotations

import os
import re

from tests import third_party
from tests.deploy import test_esp32s3_qemu as s3

# MobileNetV2-0.5's op 8 (block1's depthwise: 32x32x48, 3x3, stride 2, SAME -> TFLM
# passes padding 0): ESP-NN d45b843 asks 5,344 B and its kernel writes 55,936 B.
OP8 = "mnv2_op8"
# Shapes whose ESP-NN size is overrun (the guard's cases): op 8's branch (padding 0, a
# right/bottom edge to pad, padded input > 40 KB) and the one-axis-padded branch.
OVERRUN = {OP8, "s2_48x48x32", "s2_33x32x16_pad_h_only"}
# A second upstream difference, not about scratch: the non-3x3 s16 path's row tiles
# (s16 working set > 48 KB) fill the rows above/below the input with input_offset
# where the untiled path contributes 0 (5x5 SAME differs from _ansi; the same shape
# VALID, and 5x5 SAME under 48 KB, are exact). No MobileNetV2-0.5 shape (all 3x3).
TILE_PAD_ROWS = {"k5_s1_32x32x32"}


def _cases(text: str) -> dict[str, dict]:
  cases = {}
  for line in text.splitlines():
    if line.startswith("dw name="):
      fields = dict(f.split("=", 1) for f in line.split()[1:])
      assert "error" not in fields, line
      cases[fields["name"]] = {k: (v if k in ("name", "in", "filter", "pad", "out") else int(v))
                               for k, v in fields.items()}
  done = re.search(r"^dw_done cases=(\d+)", text, re.M)
  assert done and int(done.group(1)) == len(cases) > 0, text[-2000:]
  return cases


def test_esp_nn_s3_depthwise_scratch_guard(tools):
  s3.make(["dw-check"])
  from forge_tflm.deploy import firmware

  elf = os.path.join(firmware.build_dir("esp32s3"), "dw_scratch_check.elf")
  text, _ = s3.run_qemu(elf, timeout=600)
  cases = _cases(text)
  op8 = cases[OP8]
  assert (op8["in"], op8["pad"], op8["out"]) == ("32x32x48", "0x0", "16x16"), op8

  # The upstream bug, as ESP-NN d45b843 has it. This assert FAILS once espressif/esp-nn
  # fixes its size function (or the kernel tiles): then re-measure, and drop the guard
  # (core/forge_app.cc's forge_esp_nn_dw_scratch_bytes) if nothing is overrun any more.
  assert op8["asked"] == 5344 and op8["asked_past"] == 50592, op8
  assert {n for n, c in cases.items() if c["asked_past"] > 0} == OVERRUN, cases

  # The guard: what the app requests covers what the kernel writes, on every shape,
  # exactly (the guard is the kernel's footprint there, ESP-NN's size elsewhere).
  for name, c in cases.items():
    assert c["guard_past"] == 0, c
    assert c["guard"] == (c["asked"] + c["asked_past"] if name in OVERRUN else c["asked"]), c
  assert op8["guard"] == 55936

  # Bit-exact with _ansi whatever the scratch (the kernel's own buffer here is private:
  # in the app the overrun lands on other arena tensors, the "70 LSB" MobileNetV2 run).
  for name, c in cases.items():
    if name in TILE_PAD_ROWS:
      assert c["mismatches"] > 0 and c["guard_mismatches"] == c["mismatches"], c  # upstream
    else:
      assert c["mismatches"] == 0 and c["guard_mismatches"] == 0, c
  assert all(cases[n]["mismatches"] == 0 for n in cases if n.startswith("mnv2_"))
  print("\nESP-NN S3 depthwise scratch (asked -> written past -> guard): " + "; ".join(
      f"{n} {c['asked']} +{c['asked_past']} -> {c['guard']}" for n, c in cases.items()
      if n in OVERRUN))


tools = s3.tools  # the session fixture (skips without the toolchain or QEMU)
