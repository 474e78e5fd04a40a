"""Build an export into a firmware, run it under an emulator and verify its log.

`forge_tflm run-firmware` is export -> build -> run -> verify-device in one call; the
tests and benchmarks call the same functions. The Make builds and bare-metal emulator
command lines are forge_tflm.deploy.targets'. Builds happen out of the export folder:
objects live in this checkout's build cache (toolchains.build_cache()), the export
folder only holds export-firmware's files, and the run's log and flash image go to the
run folder the caller names.

Targets:
  host         esp32s3_app/host's embedded build (TFLM reference kernels, x86)
  cortex-m4f   esp32s3_app/cortexm on qemu-system-arm mps2-an386 (CMSIS-NN DSP path),
  cortex-m55   mps3-an547 (Helium) and cortex-m3 mps2-an385 (no FPU), -icount shift=0
  cortex-m3
  esp32s3      esp32s3_app/esp32s3, bare metal, on qemu-system-xtensa -machine esp32s3
               (ESP-NN's _esp32s3 kernels; the second core parked)
  esp32s3-idf  esp32s3_app as an ESP-IDF v5.1.7 project (idf.py build, the app, its
               bootloader and partition table merged into one 4 MB flash image),
               booted from that image under qemu-system-xtensa -machine esp32s3 as a
               board boots: ROM -> second-stage bootloader -> partition table -> app.

The host and bare-metal apps take the export's mode as flags (--frozen, --gate); the
ESP-IDF app reads it from the export's header.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import shutil
import subprocess
import time

from forge_tflm.deploy import targets, toolchains
# build_dir and host_tflm_library stay importable from here (run-firmware's folders).
from forge_tflm.deploy.targets import (APP_DIR, BuildFailed, build_dir,  # noqa: F401
                                       host_tflm_library, run_build)
from forge_tflm.deploy.toolchains import ToolMissing

# target -> the Cortex-M board (targets.BOARDS: its QEMU machine).
CORTEXM = {"cortex-m4f": "an386", "cortex-m55": "an547", "cortex-m3": "an385"}
TARGETS = ("host", *CORTEXM, "esp32s3", "esp32s3-idf")
FLASH_SIZE = "4MB"  # partitions.csv fits the smallest common S3 module
# Quad PSRAM as on ESP32-S3 N8R2 modules (the emulator's only PSRAM mode): the app puts
# arenas above CONFIG_FORGE_APP_ARENA_INTERNAL_MAX there.
ESP32S3_PSRAM = "2M"
# The app's last record; a panic makes IDF reboot, which would loop forever.
_END = re.compile(r"^done ")
_CRASH = ("Guru Meditation Error", "Rebooting...", "abort() was called")


@dataclasses.dataclass(frozen=True)
class DeviceRun:
  target: str
  log_path: str      # the console output, as verify-device reads it
  seconds: float     # emulator wall time
  ended: bool        # the app printed its done line


def _say(progress, text: str) -> None:
  if progress:
    progress(text)


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


def _idf_build_dir(config: tuple[str, ...] = ()) -> str:
  """Per checkout and per configuration (IDF does not re-read sdkconfig defaults or
  Kconfig defaults once sdkconfig exists, so new ones get a fresh build folder)."""
  h = hashlib.sha1("\n".join(config).encode())
  for name in ("sdkconfig.defaults", "sdkconfig.defaults.esp32s3", "partitions.csv",
               "main/Kconfig.projbuild", "../custom_ops/forge_recalib/Kconfig"):
    with open(os.path.join(APP_DIR, name), "rb") as f:
      h.update(f.read())
  return os.path.join(toolchains.build_cache(), "esp32s3-idf", h.hexdigest()[:10])


def build_esp32s3_idf(export_dir: str, flash_out: str, progress=None,
                      config: tuple[str, ...] = ()) -> str:
  """idf.py build of esp32s3_app with `export_dir`'s arrays; writes the merged flash
  image (bootloader, partition table, app) to `flash_out` and returns it. `config`:
  sdkconfig lines over the app's defaults (e.g. CONFIG_FORGE_APP_TRACE_NONE=y), a build
  folder of their own."""
  idf = toolchains.esp_idf(progress)
  components = _local_components()
  build = _idf_build_dir(config)
  env = idf.environ()
  defaults = [os.path.join(APP_DIR, "sdkconfig.defaults")]  # IDF adds its .esp32s3
  if config:
    defaults.append(build + ".defaults")
    with open(defaults[-1], "w") as f:
      f.write("\n".join(config) + "\n")
  with toolchains.locked(build + ".lock"):
    _say(progress, f"idf.py build in {build}")
    run_build(idf.idf_py() + [
        "-B", build, "-DIDF_TARGET=esp32s3", f"-DSDKCONFIG={build}/sdkconfig",
        f"-DSDKCONFIG_DEFAULTS={';'.join(defaults)}",
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
         "esp32s3", "-m", ESP32S3_PSRAM, "-L", os.path.join(qemu, "share"),
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


# ------------------------------------------------ host and bare-metal targets

def _builtin_ops(expected: dict) -> list[str]:
  return sorted(set(expected["ops"]) - {"FORGE_RECALIB"})


def _mode_flags(expected: dict) -> list[str]:
  # Every op's checksum where the export has them (all modes but gated).
  trace = "--trace=forge" if expected["mode"] == "gated" else "--trace=all"
  return [trace] + {"adapt": [], "frozen": ["--frozen"], "gated": ["--gate"]}[expected["mode"]]


def _build_host(export_dir: str, run_dir: str, expected: dict, progress) -> list[str]:
  binary = os.path.join(os.path.abspath(run_dir), "forge_app_embedded")
  targets.build_host("reference", _builtin_ops(expected), os.path.abspath(export_dir), binary,
                     progress)
  return [binary, *_mode_flags(expected)]


def _build_cortexm(target: str, export_dir: str, run_dir: str, expected: dict,
                   progress) -> list[str]:
  board = CORTEXM[target]
  elf = targets.build_cortexm_elf(
      board, os.path.abspath(export_dir),
      os.path.join(os.path.abspath(run_dir), f"forge_app_{board}.elf"),
      ops=_builtin_ops(expected), progress=progress)
  return targets.cortexm_qemu_command(board, elf, os.path.join(run_dir, "semihosting.out"),
                                      " ".join(_mode_flags(expected)))


def _build_esp32s3(export_dir: str, run_dir: str, expected: dict, progress) -> list[str]:
  elf = os.path.join(os.path.abspath(run_dir), "forge_app_esp32s3.elf")
  targets.build_esp32s3_elf(os.path.abspath(export_dir), elf, ops=_builtin_ops(expected),
                            progress=progress)
  # The run folder keeps what the emulator loads.
  park = os.path.join(run_dir, "cpu1_park.bin")
  shutil.copy2(targets.park_bin(), park)
  return targets.esp32s3_qemu_command(elf, None, " ".join(_mode_flags(expected)), park=park)


def _run_command(target: str, cmd: list[str], run_dir: str, timeout: float, progress,
                 images: int) -> DeviceRun:
  """Runs a host binary or a bare-metal emulator; Cortex-M's console is its semihosting
  file (copied into device.log), the others' their stdout."""
  log = os.path.join(run_dir, "device.log")
  if target not in CORTEXM:
    return _console_run(target, cmd, log, timeout, progress, images)
  out = os.path.join(run_dir, "semihosting.out")
  if os.path.exists(out):
    os.remove(out)
  t0 = time.monotonic()
  try:
    subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)
  except subprocess.TimeoutExpired:
    pass
  text = open(out, "rb").read() if os.path.exists(out) else b""
  with open(log, "wb") as f:
    f.write(text)
  return DeviceRun(target=target, log_path=log, seconds=time.monotonic() - t0,
                   ended=re.search(rb"^done ", text, re.M) is not None)


def missing_tools(target: str) -> str | None:
  """Why `target` cannot be built or run here (what to install), or None."""
  try:
    if target == "esp32s3-idf":
      toolchains.need_programs("cmake", "ninja", apt="cmake ninja-build")
      toolchains.esp32s3_tools()
      toolchains.shared_file("toolchains", "esp-idf", toolchains.IDF_TARBALL)
    elif target == "esp32s3":
      toolchains.esp32s3_tools()
    elif target in CORTEXM:
      toolchains.arm_tools()
    else:
      toolchains.need_programs("make", "g++", apt="make g++")
    for name in ("tflite-micro", "esp-tflite-micro", "esp-nn", "CMSIS-NN", "CMSIS_6"):
      toolchains.shared_file("third_party", toolchains.SNAPSHOTS[name])
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
                  progress=None, idf_config: tuple[str, ...] = (),
                  icount: bool = False) -> DeviceRun:
  """Builds `export_dir` (export-firmware's folder) for `target`, runs it under the
  emulator and returns the run, its log in run_dir/device.log. esp32s3-idf only:
  `idf_config` (sdkconfig lines, build_esp32s3_idf) and `icount` (QEMU's -icount
  shift=0: CCOUNT then counts executed instructions, not host time)."""
  if target not in TARGETS:
    raise ValueError(f"unknown target {target!r}: one of {', '.join(TARGETS)}")
  from forge_tflm.deploy.export import load_expected

  expected = load_expected(export_dir)
  images = expected["images"]
  os.makedirs(run_dir, exist_ok=True)
  if target == "esp32s3-idf":
    flash = build_esp32s3_idf(export_dir, os.path.join(run_dir, "flash.bin"), progress,
                              idf_config)
    _say(progress, f"{target}: booting {flash} under qemu-system-xtensa -machine esp32s3")
    return run_esp32s3_flash(flash, os.path.join(run_dir, "device.log"), timeout=timeout,
                             progress=progress, images=images, icount=icount)
  if target == "host":
    cmd = _build_host(export_dir, run_dir, expected, progress)
  elif target == "esp32s3":
    cmd = _build_esp32s3(export_dir, run_dir, expected, progress)
  else:
    cmd = _build_cortexm(target, export_dir, run_dir, expected, progress)
  _say(progress, f"{target}: running {images} images")
  return _run_command(target, cmd, run_dir, timeout, progress, images)


def verify_run(run: DeviceRun, export_dir: str):
  from forge_tflm.deploy.export import load_expected
  from forge_tflm.deploy.verify import decode_log, verify

  with open(run.log_path, "rb") as f:
    text = decode_log(f.read())
  return verify(text, load_expected(export_dir))


def run_firmware(artifact: str, target: str, out_dir: str, *, timeout: float = 1800,
                 progress=None, idf_config: tuple[str, ...] = (), icount: bool = False,
                 **export_args) -> FirmwareResult:
  """export-firmware into out_dir/export, build for `target`, run under its emulator
  (log: out_dir/device.log) and verify the log against the export."""
  from forge_tflm.deploy.export import export_firmware

  why = missing_tools(target)  # Before the slow export.
  if why:
    raise ToolMissing(f"--target={target} cannot run here: {why}")
  export_dir = os.path.join(out_dir, "export")
  _say(progress, f"exporting {artifact} into {export_dir}")
  export_firmware(artifact, export_dir, **export_args)
  run = build_and_run(target, export_dir, out_dir, timeout=timeout, progress=progress,
                      idf_config=idf_config, icount=icount)
  return FirmwareResult(target=target, export_dir=export_dir, run=run,
                        verification=verify_run(run, export_dir))
