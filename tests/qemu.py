"""Running an emulator whose console goes to a file (QEMU's semihosting or UART chardev):
a fresh file per run (parallel workers share build folders), removed afterwards."""

from __future__ import annotations

import os
import subprocess
import time


def run_console(command_for, elf: str, timeout: float):
  """Runs command_for(out_file); returns (the process result, the console text)."""
  out_file = f"{elf}.{os.getpid()}.{time.monotonic_ns()}.out"
  cmd = command_for(out_file)
  try:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                       stdin=subprocess.DEVNULL)
    text = open(out_file).read() if os.path.exists(out_file) else ""
  finally:
    if os.path.exists(out_file):
      os.remove(out_file)
  return r, text
