"""Build an export into a firmware, run it under an emulator and verify its log.

`forge_tflm run-firmware` is export -> build -> run -> verify-device in one call; the
tests and benchmarks call the same functions. Builds happen out of the export folder:
objects live in this checkout's build cache (toolchains.build_cache()), the export
folder only holds export-firmware's files, and the run's log and flash image go to the
run folder the caller names.

Targets:
  esp32s3-idf  esp32s3_app as an ESP-IDF v5.1.7 project (idf.py build, the app, its
               bootloader and partition table merged into one 4 MB flash image),
               booted from that image under qemu-system-xtensa -machine esp32s3 as a
               board boots: ROM -> second-stage bootloader -> partition table -> app.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import shutil
import subprocess
import time

from forge_tflm.deploy import toolchains
from forge_tflm.deploy.toolchains import ToolMissing

APP_DIR = os.path.join(toolchains.REPO_ROOT, "esp32s3_app")
TARGETS = ("esp32s3-idf",)
FLASH_SIZE = "4MB"  # partitions.csv fits the smallest common S3 module
# The app's last record; a panic makes IDF reboot, which would loop forever.
_END = re.compile(r"^done ")
_CRASH = ("Guru Meditation Error", "Rebooting...", "abort() was called")


class BuildFailed(OSError):
  """A build step failed: the message ends with the tool's last output lines."""


@dataclasses.dataclass(frozen=True)
class DeviceRun:
  target: str
  log_path: str      # the console output, as verify-device reads it
  seconds: float     # emulator wall time
  ended: bool        # the app printed its done line


def _say(progress, text: str) -> None:
  if progress:
    progress(text)


def _run_build(cmd: list[str], env: dict, what: str, progress) -> None:
  """Runs a build command, reporting ninja's [k/n] steps; BuildFailed with its tail."""
  proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, cwd=APP_DIR)
  tail: list[str] = []
  last = 0.0
  for line in proc.stdout:
    tail = (tail + [line.rstrip()])[-40:]
    m = re.match(r"\[(\d+)/(\d+)\]", line)
    if m and progress and time.monotonic() - last > 10:
      last = time.monotonic()
      progress(f"{what}: step {m.group(1)}/{m.group(2)}")
  if proc.wait() != 0:
    raise BuildFailed(f"{what} failed (exit {proc.returncode}):\n" + "\n".join(tail))


def _local_components() -> str:
  """esp-tflite-micro and esp-nn from the pinned snapshots, under the names the component
  manager takes in place of a download (espressif__<name>; hard links, made once)."""
  root = os.path.join(toolchains.cache_root(), "idf_components",
                      toolchains.SNAPSHOTS["esp-tflite-micro"][:-7] + "+"
                      + toolchains.SNAPSHOTS["esp-nn"][:-7])
  if not os.path.isfile(os.path.join(root, ".complete")):
    with toolchains.locked(root + ".lock"):
      if not os.path.isfile(os.path.join(root, ".complete")):
        shutil.rmtree(root, ignore_errors=True)
        for name in ("esp-tflite-micro", "esp-nn"):
          shutil.copytree(toolchains.snapshot(name), os.path.join(root, f"espressif__{name}"),
                          copy_function=os.link)
        open(os.path.join(root, ".complete"), "w").close()
  return root


def _idf_build_dir() -> str:
  """Per checkout and per sdkconfig defaults (IDF does not re-read them once sdkconfig
  exists, so new defaults get a fresh build folder)."""
  h = hashlib.sha1()
  for name in ("sdkconfig.defaults", "sdkconfig.defaults.esp32s3", "partitions.csv"):
    with open(os.path.join(APP_DIR, name), "rb") as f:
      h.update(f.read())
  return os.path.join(toolchains.build_cache(), "esp32s3-idf", h.hexdigest()[:10])


def build_esp32s3_idf(export_dir: str, flash_out: str, progress=None) -> str:
  """idf.py build of esp32s3_app with `export_dir`'s arrays; writes the merged flash
  image (bootloader, partition table, app) to `flash_out` and returns it."""
  idf = toolchains.esp_idf(progress)
  components = _local_components()
  build = _idf_build_dir()
  env = idf.environ()
  with toolchains.locked(build + ".lock"):
    _say(progress, f"idf.py build in {build}")
    _run_build(idf.idf_py() + [
        "-B", build, "-DIDF_TARGET=esp32s3", f"-DSDKCONFIG={build}/sdkconfig",
        f"-DFORGE_APP_GENERATED={os.path.abspath(export_dir)}",
        f"-DFORGE_APP_LOCAL_COMPONENTS={components}", "build"], env, "idf.py build", progress)
    os.makedirs(os.path.dirname(os.path.abspath(flash_out)), exist_ok=True)
    tmp = flash_out + ".partial"
    r = subprocess.run([idf.python, "-m", "esptool", "--chip", "esp32s3", "merge_bin",
                        "--fill-flash-size", FLASH_SIZE, "-o", os.path.abspath(tmp),
                        "@flash_args"], cwd=build, env=env, capture_output=True, text=True)
    if r.returncode != 0:
      raise BuildFailed(f"esptool merge_bin failed:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    os.replace(tmp, flash_out)
  return flash_out


def run_esp32s3_flash(flash: str, log_path: str, *, timeout: float = 1800,
                      icount: bool = False, progress=None, images: int | None = None
                      ) -> DeviceRun:
  """Boots `flash` on the emulated ESP32-S3 (ROM -> bootloader -> app) and copies UART0
  to `log_path` until the app's done line, a panic, or `timeout` seconds."""
  _, qemu = toolchains.esp32s3_tools()
  # -nographic: UART0 on stdout (QEMU's monitor multiplexed on it, never used).
  cmd = [os.path.join(qemu, "bin", "qemu-system-xtensa"), "-nographic", "-machine",
         "esp32s3", "-L", os.path.join(qemu, "share"),
         "-drive", f"file={flash},if=mtd,format=raw"]
  cmd += ["-icount", "shift=0"] if icount else []
  return _console_run("esp32s3-idf", cmd, log_path, timeout, progress, images)


def _console_run(target: str, cmd: list[str], log_path: str, timeout: float, progress,
                 images: int | None) -> DeviceRun:
  t0 = time.monotonic()
  proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT)
  ended, seen, last = False, 0, 0.0
  tmp = log_path + ".partial"
  try:
    with open(tmp, "wb") as log:
      for raw in _lines_until(proc, t0 + timeout):
        log.write(raw)
        line = raw.decode("utf-8", "replace")
        if line.startswith("img "):
          seen += 1
          if progress and time.monotonic() - last > 5:
            last = time.monotonic()
            progress(f"{target}: image {seen}" + (f"/{images}" if images else ""))
        if _END.match(line):
          ended = True
          break
        if any(s in line for s in _CRASH):
          break
  finally:
    proc.kill()
    proc.wait()
  os.replace(tmp, log_path)
  return DeviceRun(target=target, log_path=log_path, seconds=time.monotonic() - t0,
                   ended=ended)


def _lines_until(proc, deadline: float):
  """proc's output lines until it exits or the deadline passes (then it is killed)."""
  import selectors

  sel = selectors.DefaultSelector()
  sel.register(proc.stdout, selectors.EVENT_READ)
  buf = b""
  while True:
    left = deadline - time.monotonic()
    if left <= 0 or not sel.select(timeout=min(left, 5.0)):
      if left <= 0:
        return
      continue
    chunk = os.read(proc.stdout.fileno(), 65536)
    if not chunk:
      if buf:
        yield buf
      return
    buf += chunk
    *lines, buf = buf.split(b"\n")
    for line in lines:
      yield line + b"\n"


def missing_tools(target: str) -> str | None:
  """Why `target` cannot be built or run here (what to install), or None."""
  try:
    if target == "esp32s3-idf":
      toolchains.need_programs("cmake", "ninja", apt="cmake ninja-build")
      toolchains.esp32s3_tools()
      toolchains._shared_file("toolchains", "esp-idf", toolchains.IDF_TARBALL)
  except ToolMissing as e:
    return str(e)
  return None


@dataclasses.dataclass(frozen=True)
class FirmwareResult:
  target: str
  export_dir: str
  run: DeviceRun
  verification: object  # forge_tflm.deploy.verify.Verification


def build_and_run(target: str, export_dir: str, run_dir: str, *, timeout: float = 1800,
                  progress=None) -> DeviceRun:
  """Builds `export_dir` (export-firmware's folder) for `target`, runs it under the
  emulator and returns the run, its log in run_dir/device.log."""
  if target not in TARGETS:
    raise ValueError(f"unknown target {target!r}: one of {', '.join(TARGETS)}")
  with open(os.path.join(export_dir, "expected.json")) as f:
    images = int(re.search(r'"images": (\d+)', f.read()).group(1))
  os.makedirs(run_dir, exist_ok=True)
  flash = build_esp32s3_idf(export_dir, os.path.join(run_dir, "flash.bin"), progress)
  _say(progress, f"{target}: booting {flash} under qemu-system-xtensa -machine esp32s3")
  return run_esp32s3_flash(flash, os.path.join(run_dir, "device.log"), timeout=timeout,
                           progress=progress, images=images)


def verify_run(run: DeviceRun, export_dir: str):
  from forge_tflm.deploy.export import load_expected
  from forge_tflm.deploy.verify import decode_log, verify

  with open(run.log_path, "rb") as f:
    text = decode_log(f.read())
  return verify(text, load_expected(export_dir))


def run_firmware(artifact: str, target: str, out_dir: str, *, timeout: float = 1800,
                 progress=None, **export_args) -> FirmwareResult:
  """export-firmware into out_dir/export, build for `target`, run under its emulator
  (log: out_dir/device.log) and verify the log against the export."""
  from forge_tflm.deploy.export import export_firmware

  why = missing_tools(target)  # Before the slow export.
  if why:
    raise ToolMissing(f"--target={target} cannot run here: {why}")
  export_dir = os.path.join(out_dir, "export")
  _say(progress, f"exporting {artifact} into {export_dir}")
  export_firmware(artifact, export_dir, **export_args)
  run = build_and_run(target, export_dir, out_dir, timeout=timeout, progress=progress)
  return FirmwareResult(target=target, export_dir=export_dir, run=run,
                        verification=verify_run(run, export_dir))
