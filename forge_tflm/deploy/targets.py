"""The app core (esp32s3_app) built for a target and run under its emulator.

What run-firmware (forge_tflm.deploy.firmware), the device tests and the benchmarks do
to build and run esp32s3_app, written once:

  - make in esp32s3_app/{host,cortexm,esp32s3} into this checkout's build cache, one
    folder per target (per board on Cortex-M) shared by every op set, each under its
    lock, with the third-party trees from forge_tflm.deploy.toolchains;
  - the Cortex-M boards (qemu-system-arm mps2/mps3 machines) and the emulated ESP32-S3
    (qemu-system-xtensa -machine esp32s3, the second core parked): their QEMU command
    lines and runs whose console goes to a file;
  - the C arrays of an artifact and its images, and the bundled ResNet-20 converted
    once into the build cache for every device test and benchmark.

A missing tool or tree raises toolchains.ToolMissing, a failed build BuildFailed.
"""

from __future__ import annotations

import functools
import glob
import hashlib
import json
import os
import re
import subprocess
import sys
import time

from forge_tflm.deploy import toolchains

REPO_ROOT = toolchains.REPO_ROOT
APP_DIR = os.path.join(REPO_ROOT, "esp32s3_app")
MODEL = os.path.join(REPO_ROOT, "models", "resnet20_cifar10.keras")  # the bundled ResNet-20
DATA_DIR = os.path.join(toolchains.shared_dir(), "datasets", "cifar10")
# MLPerf Tiny's image-classification ResNet-8 (third party: read, never copied).
MLPERF_IC_DIR = os.path.join(toolchains.shared_dir(), "models", "mlperf_tiny_ic")
STREAM_LIMIT = 200  # the evaluator's subset of the test images (--limit=200 --seed=0)

# board -> (qemu machine, CPU, SysTick instructions per tick x1000 under -icount shift=0)
BOARDS = {"an386": ("mps2-an386", "Cortex-M4F", 40000),
          "an547": ("mps3-an547", "Cortex-M55", 31250),
          "an385": ("mps2-an385", "Cortex-M3", 40000)}
# Boards without an FPU run the integer artifact on FORGE built for it alone
# (FORGE_ARITH=int: no float operation linked from FORGE).
FPU_LESS = {"an385"}
HOST_OPS = ("CONV_2D", "ADD", "MEAN", "FULLY_CONNECTED")  # the Makefiles' default
# ResNet-20's operators and MLPerf Tiny ResNet-8's: one S3 library for both models.
ESP32S3_OPS = ("ADD", "AVERAGE_POOL_2D", "CONV_2D", "FULLY_CONNECTED", "MEAN", "RESHAPE",
               "SOFTMAX")
ESP32S3_PARK_ADDR = "0x40000400"  # cpu1_park.S's load address (esp32s3_app/esp32s3)


class BuildFailed(OSError):
  """A build step failed: the message ends with the tool's last output lines."""


def _say(progress, text: str) -> None:
  if progress:
    progress(text)


# ------------------------------------------------------------------ building

def run_build(cmd: list[str], env: dict | None, what: str, progress=None) -> None:
  """Runs a build command in esp32s3_app, reporting ninja's [k/n] steps; BuildFailed
  with the output's tail."""
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


def build_dir(kind: str) -> str:
  """A target's build folder (host, host-esp_nn, cortexm-<board>, esp32s3): every
  model's, as the Makefiles keep what depends on the operator set apart."""
  return os.path.join(toolchains.build_cache(), kind)


def make(subdir: str, kind: str, args: list[str], goals: list[str], progress=None) -> None:
  """nice make -C esp32s3_app/<subdir> -j2 <goals> into build_dir(kind), under its lock
  (parallel test workers and sessions share the folder)."""
  build = build_dir(kind)
  _say(progress, f"make -C esp32s3_app/{subdir} {' '.join(goals)} (objects in {build})")
  with toolchains.locked(build + ".lock"):
    run_build(["nice", "make", "-C", os.path.join(APP_DIR, subdir), "-j2", *goals,
               f"BUILD_DIR={build}", *args], None, f"make -C esp32s3_app/{subdir}", progress)


def _ops_arg(ops) -> list[str]:
  # No OPS: the Makefile's default set.
  return ["OPS=" + " ".join(ops)] if ops else []


def _host_args(kernels: str, ops) -> list[str]:
  tflm = toolchains.snapshot("tflite-micro")
  esp_tflm = toolchains.snapshot("esp-tflite-micro")
  args = [f"KERNELS={kernels}", f"THIRD_PARTY={os.path.join(esp_tflm, 'third_party')}"]
  if kernels == "reference":
    args.append(f"TFLM_DIR={tflm}")
  else:
    args += [f"TFLM_DIR={esp_tflm}", f"ESP_NN_DIR={toolchains.snapshot('esp-nn')}"]
  return args + _ops_arg(sorted(ops))


def build_host(kernels: str = "reference", ops=HOST_OPS, gen: str | None = None,
               binary: str | None = None, progress=None) -> str:
  """esp32s3_app/host for `kernels` (reference: TFLM's; esp_nn: esp-tflite-micro's over
  ESP-NN's _ansi kernels) with `ops`; returns the binary. Without gen the file-fed app
  (default: in the build folder); with gen (an export folder) the embedded binary
  (default: beside the export's data)."""
  kind = "host" if kernels == "reference" else f"host-{kernels}"
  if gen is None:
    binary = binary or os.path.join(build_dir(kind), "bin",
                                    f"forge_app_host_{'+'.join(sorted(ops))}")
    goals = ["all", f"BIN={binary}"]
  else:
    binary = binary or os.path.join(str(gen), f"forge_app_embedded_{kernels}")
    goals = ["embedded", f"GEN_DIR={gen}", f"EMBEDDED_BIN={binary}"]
  make("host", kind, _host_args(kernels, ops), goals, progress)
  return binary


def host_tflm_library(ops: str = " ".join(sorted(HOST_OPS)), progress=None) -> str:
  """The host target's TFLM archive (framework and `ops`' reference kernels, from the
  TFLM snapshot) in its build folder, built if needed; returns its path."""
  archive = os.path.join(build_dir("host"), "ops", "+".join(sorted(ops.split())),
                         "libtflm_subset.a")
  make("host", "host", _host_args("reference", ops.split()), [archive], progress)
  return archive


def forge_arith(board: str, name: str) -> str:
  """The Cortex-M Makefile's FORGE_ARITH for artifact `name` on `board` (FPU_LESS)."""
  return "int" if board in FPU_LESS and name == "forge_int" else "any"


def cortexm_make_args(board: str) -> list[str]:
  """esp32s3_app/cortexm's board and source trees (TFLM, CMSIS-NN, CMSIS_6)."""
  esp = toolchains.snapshot("esp-tflite-micro")
  return [f"BOARD={board}", f"TFLM_DIR={toolchains.snapshot('tflite-micro')}",
          f"THIRD_PARTY={os.path.join(esp, 'third_party')}",
          f"CMSIS_NN_DIR={toolchains.snapshot('CMSIS-NN')}",
          f"CMSIS_DIR={toolchains.snapshot('CMSIS_6')}"]


def make_cortexm(board: str, goals: list[str], ops=None, arith: str = "any",
                 progress=None) -> None:
  """esp32s3_app/cortexm's Makefile for `board` (one build folder per board); ops: the
  OPS to compile (default: the Makefile's ResNet-20 set); arith: FORGE_ARITH (any, or
  int: FORGE for the integer arithmetic alone)."""
  args = cortexm_make_args(board) + _ops_arg(ops) + [f"FORGE_ARITH={arith}"]
  make("cortexm", f"cortexm-{board}", args, goals, progress)


def build_cortexm_elf(board: str, gen_dir: str, elf: str | None = None, *, ops=None,
                      arith: str = "any", progress=None) -> str:
  """Links `board`'s ELF with the C arrays in gen_dir (objects from the build folder);
  returns it (default: forge_app_<board>[_int].elf in gen_dir)."""
  suffix = "_int" if arith == "int" else ""
  elf = elf or os.path.join(gen_dir, f"forge_app_{board}{suffix}.elf")
  make_cortexm(board, ["all", f"GEN_DIR={gen_dir}", f"ELF={elf}"], ops, arith, progress)
  return elf


def make_esp32s3(goals: list[str], ops=ESP32S3_OPS, variant: str = "ansi",
                 progress=None) -> None:
  """esp32s3_app/esp32s3's Makefile (bare metal, ESP-NN's _esp32s3 kernels); variant:
  FORGE's C core (ansi or esp32s3)."""
  prefix, _ = toolchains.esp32s3_tools()
  args = [f"PREFIX={prefix}", f"FORGE_VARIANT={variant}",
          f"TFLM_DIR={toolchains.snapshot('esp-tflite-micro')}",
          f"ESP_NN_DIR={toolchains.snapshot('esp-nn')}"] + _ops_arg(ops)
  make("esp32s3", "esp32s3", args, goals, progress)


def build_esp32s3_elf(gen_dir: str, elf: str | None = None, *, ops=ESP32S3_OPS,
                      variant: str = "ansi", progress=None) -> str:
  """Links the S3 ELF and its flash image (<elf without .elf>.flash.bin) with gen_dir's
  C arrays; returns the ELF (default: forge_app_esp32s3[_<variant>].elf in gen_dir)."""
  suffix = "" if variant == "ansi" else "_" + variant
  elf = elf or os.path.join(gen_dir, f"forge_app_esp32s3{suffix}.elf")
  make_esp32s3(["all", f"GEN_DIR={gen_dir}", f"ELF={elf}"], ops, variant, progress)
  return elf


@functools.cache
def park_bin() -> str:
  """The second core's parking code (esp32s3_app/esp32s3/cpu1_park.S) in the S3 build
  folder, built once per process."""
  make_esp32s3(["park"])
  return os.path.join(build_dir("esp32s3"), "cpu1_park.bin")


# ------------------------------------------------------------------- running

def cortexm_qemu_command(board: str, elf: str, console: str, args: str = "") -> list[str]:
  """qemu-system-arm for `board` with -icount shift=0 (SysTick counts instructions);
  the target's semihosting output goes to the file `console` (a file chardev: nothing
  of QEMU's own is mixed in); args: the app's command line."""
  cmd = ["qemu-system-arm", "-M", BOARDS[board][0], "-display", "none", "-serial", "null",
         "-monitor", "none", "-chardev", f"file,id=semihosting,path={console}",
         "-semihosting-config", "enable=on,target=native,chardev=semihosting",
         "-icount", "shift=0", "-kernel", elf]
  return cmd + (["-append", args] if args else [])


def esp32s3_qemu_command(elf: str, console: str | None = None, args: str = "",
                         icount: bool = False, flash: str | None = None,
                         park: str | None = None) -> list[str]:
  """qemu-system-xtensa on the esp32s3 machine: UART0 to the file `console` (None:
  stdout, -nographic), the flash image (default: the ELF's) as an MTD drive,
  semihosting for -append and the exit status, the second core parked (`park`,
  default park_bin(): otherwise it spins and, under -icount, advances CCOUNT)."""
  _, qemu = toolchains.esp32s3_tools()
  flash = flash or elf[:-len(".elf")] + ".flash.bin"
  out = (["-nographic"] if console is None else
         ["-display", "none", "-monitor", "none", "-serial", f"file:{console}"])
  cmd = [os.path.join(qemu, "bin", "qemu-system-xtensa"), "-machine", "esp32s3", "-m", "2M",
         "-L", os.path.join(qemu, "share"), *out, "-semihosting",
         "-drive", f"file={flash},if=mtd,format=raw,readonly=on",
         "-device", f"loader,file={park or park_bin()},addr={ESP32S3_PARK_ADDR},cpu-num=1,"
         "force-raw=on", "-kernel", elf]
  cmd += ["-icount", "shift=0"] if icount else []
  return cmd + (["-append", args] if args else [])


def run_console(command_for, elf: str, timeout: float):
  """Runs command_for(console_file) for an emulator whose console goes to a file: a
  fresh file per run beside `elf` (parallel runs share build folders), removed
  afterwards; returns (the process result, the console text)."""
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


def _fields(text: str, record: str) -> dict:
  m = re.search(rf"^{record} (.*)$", text, re.M)
  return dict(f.split("=", 1) for f in m.group(1).split()) if m else {}


def run_cortexm(board: str, elf: str, args: str = "", timeout: float = 1800
                ) -> tuple[str, dict]:
  """Runs `elf` on the board's machine; returns (its output, the calibration fields of
  the app's "cortexm" line). RuntimeError on a non-zero exit."""
  r, text = run_console(lambda out: cortexm_qemu_command(board, elf, out, args), elf,
                        timeout)
  if r.returncode != 0:
    raise RuntimeError(f"{' '.join(r.args)}: exit {r.returncode}\n{text[-3000:]}"
                       f"{r.stdout[-2000:]}{r.stderr[-2000:]}")
  return text, _fields(text, "cortexm")


def run_esp32s3(elf: str, args: str = "", icount: bool = False, timeout: float = 1800,
                flash: str | None = None) -> tuple[str, dict]:
  """Runs `elf` on the emulated S3; returns (its UART output, the fields of its
  "esp32s3" line). RuntimeError on a non-zero exit."""
  r, text = run_console(lambda out: esp32s3_qemu_command(elf, out, args, icount, flash),
                        elf, timeout)
  if r.returncode != 0:
    raise RuntimeError(f"{' '.join(r.args)}: exit {r.returncode}\n{text[-3000:]}"
                       f"{r.stderr[-2000:]}")
  return text, _fields(text, "esp32s3")


# --------------------------------------------------------- data and artifacts

def gen_dir_for(artifact: str, x, tag: str) -> str:
  """The model + images C arrays (write_c_arrays) in the build cache, written once per
  content (artifact bytes and images); returns the folder."""
  import numpy as np

  from forge_tflm.deploy.streams import write_c_arrays

  with open(artifact, "rb") as f:
    key = hashlib.sha256(f.read() + np.ascontiguousarray(x).tobytes()).hexdigest()[:16]
  out = os.path.join(toolchains.build_cache(), "cortexm", "gen", f"{tag}_{len(x)}_{key}")
  with toolchains.locked(out + ".lock"):
    if not os.path.exists(os.path.join(out, "forge_app_data.cc")):
      write_c_arrays(out, artifact, x)
  return out


def converter_hash(model: str = MODEL) -> str:
  """Model bytes + converter sources (and the op's header, whose constants the manifest
  states): the key of a model's converted artifacts, so a converter change reconverts."""
  h = hashlib.sha256()
  with open(model, "rb") as f:
    h.update(f.read())
  for path in sorted(glob.glob(os.path.join(REPO_ROOT, "converter", "*.py")) +
                     glob.glob(os.path.join(REPO_ROOT, "custom_ops", "forge_recalib", "src",
                                            "*.h")) +
                     glob.glob(os.path.join(REPO_ROOT, "forge_tflm", "ops", "*.py")) +
                     glob.glob(os.path.join(REPO_ROOT, "forge_tflm", "*.py"))):
    with open(path, "rb") as f:
      h.update(path.encode() + f.read())
  return h.hexdigest()[:16]


def artifact_root(model: str = MODEL) -> str:
  """The build-cache folder of `model`'s converted artifacts (lock: <folder>.lock)."""
  return os.path.join(toolchains.build_cache(), "deploy_artifacts", converter_hash(model))


def convert(args: list[str], model: str = MODEL, data_dir: str = DATA_DIR) -> None:
  """`forge_tflm convert` of `model` in a child process (nice) with `args`."""
  cmd = [sys.executable, "-m", "forge_tflm.cli.main", "convert", f"--model={model}",
         f"--data_dir={data_dir}"] + args
  r = subprocess.run(["nice"] + cmd, capture_output=True, text=True, cwd=REPO_ROOT)
  if r.returncode != 0:
    raise RuntimeError(f"{' '.join(cmd)}\n{r.stderr[-4000:]}")


def cached_conversion(model: str, name: str, args: list[str]) -> str:
  """`model` converted with `args` once into artifact_root(model)/name (under its lock),
  so every caller that converts the same shares the file and a converter change
  converts again."""
  root = artifact_root(model)
  path = os.path.join(root, name)
  with toolchains.locked(root + ".lock"):
    os.makedirs(root, exist_ok=True)
    if not os.path.exists(path):
      convert([f"--output={path}"] + args, model=model)
  return path


def _convert_first(root: str) -> None:
  """The 21-site artifact and the plain int8 model (one conversion); the caller holds
  the folder's lock."""
  os.makedirs(root, exist_ok=True)
  forge_all = os.path.join(root, "r20_forge_all.tflite")
  plain = os.path.join(root, "r20_int8.tflite")
  if not (os.path.exists(forge_all) and os.path.exists(plain)):
    convert([f"--output={forge_all}", f"--plain_output={plain}"])


def plain_resnet20() -> str:
  """The bundled ResNet-20's plain int8 model (artifact_paths()["plain"])."""
  root = artifact_root()
  with toolchains.locked(root + ".lock"):
    _convert_first(root)
  return os.path.join(root, "r20_int8.tflite")


def artifact_paths() -> dict[str, str]:
  """name -> .tflite: the bundled ResNet-20 with FORGE at 21 sites (forge_all), at 3
  (forge_3), at 21 with the integer arithmetic (forge_int) and plain int8 (plain, no
  manifest), converted once into the build cache."""
  root = artifact_root()
  paths = {"forge_all": os.path.join(root, "r20_forge_all.tflite"),
           "plain": os.path.join(root, "r20_int8.tflite"),
           "forge_3": os.path.join(root, "r20_forge_3.tflite"),
           "forge_int": os.path.join(root, "r20_forge_int.tflite")}
  with toolchains.locked(root + ".lock"):
    _convert_first(root)
    if not os.path.exists(paths["forge_3"]):
      with open(os.path.splitext(paths["forge_all"])[0] + ".json") as f:
        sites = [s["name"] for s in json.load(f)["sites"]]
      three = [sites[0], sites[len(sites) // 2], sites[-1]]
      convert([f"--output={paths['forge_3']}", f"--sites={','.join(three)}"])
    if not os.path.exists(paths["forge_int"]):
      convert([f"--output={paths['forge_int']}", "--arithmetic=int"])
  return paths


def r20_artifacts() -> dict[str, str]:
  """artifact_paths() with, as "plain", the plain model with a manifest (convert
  --sites=none: the int8 model byte for byte; export-firmware needs the manifest)."""
  paths = artifact_paths()
  plain = os.path.join(os.path.dirname(paths["forge_all"]), "r20_sites_none.tflite")
  with toolchains.locked(plain + ".lock"):
    if not os.path.exists(plain):
      convert([f"--output={plain}", "--sites=none"])
  return {**paths, "plain": plain}
