"""The build cache for tests: forge_tflm.deploy.toolchains, with a missing piece turned
into a skip that names it (the toolchains' ToolMissing message says how to get it)."""

from __future__ import annotations

import pytest

from forge_tflm.deploy import toolchains
from forge_tflm.deploy.toolchains import SNAPSHOTS, ToolMissing, build_cache  # noqa: F401


def snapshot(name: str) -> str:
  """Path of the extracted tree `name` (a key of SNAPSHOTS); skips the test if absent."""
  try:
    return toolchains.snapshot(name)
  except ToolMissing as e:
    pytest.skip(str(e))


def missing_arm_tools() -> str | None:
  """Why bare-metal Cortex-M builds cannot run here, or None."""
  try:
    toolchains.arm_tools()
  except ToolMissing as e:
    return str(e)
  return None


def esp32s3_tools() -> tuple[str | None, str]:
  """(None, why) when the ESP32-S3 toolchain or emulator cannot run here, else
  (gcc_prefix, qemu_dir)."""
  try:
    return toolchains.esp32s3_tools()
  except ToolMissing as e:
    return None, str(e)
