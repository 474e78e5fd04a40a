"""How big a TFLite-Micro arena an artifact needs, from the model alone.

A firmware must fix its arena size at build time, before TFLM's planner has run on
the device. `arena_bytes` bounds it from the `.tflite` and its manifest, for the kernel
family the target registers (KERNELS) or, by default, the largest over all of them, so
that one export fits every target:

  activations: TFLM's greedy plan (GreedyMemoryPlanner: buffers by decreasing size,
      each at the lowest 16-byte-aligned offset free for its whole lifetime) of every
      non-constant tensor, from the op that writes it to the last op that reads it,
      plus the scratch buffers each op requests, alive only during that op: FORGE's own
      (the manifest's per-site scratch), the optimized kernels' (below) and TFLM's
      reference MEAN's (reduce_common.cc: accumulator, iterator and axis arrays);
  persistent: per tensor an eval tensor, per op a node and op data with its
      per-channel requantization arrays, on 64-bit pointers (an upper bound for MCUs),
      plus FORGE's manifest figure (state, op data, node bookkeeping);
  headroom: 15%, rounded up to 1 KiB.

The kernels' scratch comes from the kernels' own size functions, not from formulas
copied here: _scratch_sizes.c fills their structs as the TFLM adapters' Prepare does
(esp-tflite-micro's kernels/esp_nn/, TFLite-Micro's kernels/cmsis_nn/) and calls
ESP-NN's esp_nn_get_{conv,depthwise_conv,softmax}_scratch_size_esp32s3 and CMSIS-NN's
arm_*_get_buffer_size{,_dsp,_mve}. It is compiled once for the host (cc, into the build
cache) with the unmodified snapshot files that define them (forge_tflm.deploy.
toolchains.snapshot). ESP-NN's S3 files also hold the kernels, which call PIE assembly
routines that exist only for Xtensa; the C compiles on x86 as it is, and the link keeps
only what the helper's exported functions reach (-ffunction-sections, --gc-sections, a
version script exporting forge_*), so no assembly symbol is left to resolve (-z defs
checks it). CMSIS-NN defines each size function per backend (_dsp, _mve, and the plain
one, which on the host is the scalar C path), as its own Python bindings use them.

Checked against arena_used (the `mem` line every app prints) on the host, Cortex-M and
the emulated ESP32-S3 in tests/deploy (never below it); tests/deploy/test_arena.py holds
the measured S3 figures.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import subprocess

import numpy as np

from forge_tflm import tflite_graph as tg

ALIGN = 16
EVAL_TENSOR_BYTES = 24      # TfLiteEvalTensor with 64-bit pointers
NODE_BYTES = 320            # NodeAndRegistration, builtin data, op data: 64-bit, generous
HEADROOM = 0.15
# Kernel families, in _scratch_sizes.c's enum order: the host app (TFLM's reference
# kernels), the ESP32-S3 (ESP-NN's _esp32s3), Cortex-M3 (CMSIS-NN's C path), Cortex-M4F
# (its DSP path), Cortex-M55 (its Helium path).
KERNELS = ("reference", "esp_nn_s3", "cmsis_nn", "cmsis_nn_dsp", "cmsis_nn_mve")
_HELPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_scratch_sizes.c")
# Snapshot -> (include folders, the unmodified files defining the size functions).
_SOURCES = {
    "esp-nn": (("include", "src/common"),
               ("src/convolution/esp_nn_conv_esp32s3.c",
                "src/convolution/esp_nn_depthwise_conv_s8_esp32s3.c",
                "src/softmax/esp_nn_softmax_s8_esp32s3.c")),
    "CMSIS-NN": (("Include",),
                 ("Source/ConvolutionFunctions/arm_convolve_get_buffer_sizes_s8.c",
                  "Source/ConvolutionFunctions/arm_depthwise_conv_get_buffer_sizes_s8.c",
                  "Source/FullyConnectedFunctions/arm_fully_connected_get_buffer_sizes_s8.c",
                  "Source/PoolingFunctions/arm_avgpool_get_buffer_sizes_s8.c")),
}


def _aligned(n: int) -> int:
  return (int(n) + ALIGN - 1) // ALIGN * ALIGN


def _tensor_bytes(t) -> int:
  shape = [max(int(d), 1) for d in (t.shape if t.shape is not None else [])]
  return int(np.prod(shape, dtype=np.int64)) * np.dtype(tg.numpy_dtype(t)).itemsize


def greedy_plan(buffers: list[tuple[int, int, int]]) -> int:
  """Peak of TFLM's greedy plan for (bytes, first_op, last_op) buffers."""
  # Stable by decreasing size: TFLM bubble-sorts the requests, which come in tensor
  # order, then the kernels' scratch requests.
  order = sorted(range(len(buffers)), key=lambda i: -_aligned(buffers[i][0]))
  placed: list[tuple[int, int, int, int]] = []  # offset, size, first, last
  peak = 0
  for i in order:
    size, first, last = buffers[i]
    size = _aligned(size)
    live = sorted((o, s) for o, s, f, l in placed if f <= last and first <= l)
    offset = 0
    for o, s in live:
      if offset + size <= o:
        break
      offset = max(offset, _aligned(o + s))
    placed.append((offset, size, first, last))
    peak = max(peak, offset + size)
  return peak


# ------------------------------------------------------- the kernels' size functions

def _build_helper(out: str) -> None:
  """Compiles _scratch_sizes.c with the snapshots' size functions into `out` (.so)."""
  from forge_tflm.deploy import toolchains

  cmd = [os.environ.get("CC", "cc"), "-O1", "-w", "-shared", "-fPIC", "-ffunction-sections",
         "-fdata-sections", "-Wl,--gc-sections", "-Wl,-z,defs"]  # defs: no symbol left
  files = [_HELPER]
  for name, (includes, sources) in _SOURCES.items():
    tree = toolchains.snapshot(name)
    cmd += [f"-I{os.path.join(tree, i)}" for i in includes]
    files += [os.path.join(tree, s) for s in sources]
  tmp = f"{out}.{os.getpid()}"
  with open(tmp + ".map", "w") as f:
    f.write("{ global: forge_*; local: *; };\n")  # all else local: --gc-sections drops it
  try:
    r = subprocess.run(cmd + [f"-Wl,--version-script={tmp}.map", "-o", tmp] + files,
                       capture_output=True, text=True)
  except FileNotFoundError as e:
    raise toolchains.ToolMissing(f"the arena estimate compiles the kernels' scratch-size "
                                 f"functions with a host C compiler ({cmd[0]}): apt-get "
                                 f"install gcc, or pass --arena_bytes") from e
  finally:
    os.remove(tmp + ".map")
  if r.returncode != 0:
    raise RuntimeError(f"{' '.join(r.args)}\n{r.stderr[-4000:]}")
  os.replace(tmp, out)  # atomic for concurrent sessions


@functools.lru_cache(maxsize=1)
def scratch_size_library() -> ctypes.CDLL:
  """The compiled helper, built once per helper source and snapshot set."""
  from forge_tflm.deploy import toolchains

  with open(_HELPER, "rb") as f:
    key = hashlib.sha256(f.read())
  key.update(repr(_SOURCES).encode())  # the snapshots are pinned by tarball name
  for name in _SOURCES:
    key.update(toolchains.SNAPSHOTS[name].encode())
  out = os.path.join(toolchains.cache_root(), "scratch_sizes", key.hexdigest()[:16] + ".so")
  if not os.path.exists(out):
    os.makedirs(os.path.dirname(out), exist_ok=True)
    _build_helper(out)
  lib = ctypes.CDLL(out)
  for fn in ("forge_conv_scratch", "forge_depthwise_scratch", "forge_fully_connected_scratch",
             "forge_avgpool_scratch", "forge_softmax_scratch"):
    getattr(lib, fn).restype = ctypes.c_int32
  return lib


def _ints(*values) -> ctypes.Array:
  return (ctypes.c_int32 * len(values))(*(int(v) for v in values))


def _padding(stride: int, dilation: int, in_size: int, filter_size: int, out_size: int) -> int:
  """TFLM's ComputePaddingWithOffset (tensorflow/lite/kernels/padding.h), both paddings."""
  total = (out_size - 1) * stride + (filter_size - 1) * dilation + 1 - in_size
  return max(total, 0) // 2


def _conv_scratch(lib, family: int, name: str, shapes, opts) -> int:
  """CONV_2D / DEPTHWISE_CONV_2D: the kernel's request; shapes: input, filter, output."""
  (_, ih, iw, _), (_, fh, fw, _), (_, oh, ow, _) = shapes
  geo = (opts.strideH, opts.strideW,
         _padding(opts.strideH, opts.dilationHFactor, ih, fh, oh),
         _padding(opts.strideW, opts.dilationWFactor, iw, fw, ow),
         opts.dilationHFactor, opts.dilationWFactor)
  ins, filt, out = (_ints(*s) for s in shapes)
  if name == "CONV_2D":
    return lib.forge_conv_scratch(family, ins, filt, out, _ints(*geo))
  return lib.forge_depthwise_scratch(family, ins, filt, out, _ints(*geo, opts.depthMultiplier))


def _shape(sg, tensor_ids, j: int) -> list[int]:
  """Shape of the j-th of an op's tensors; [] when absent (optional or missing)."""
  i = int(tensor_ids[j]) if tensor_ids is not None and len(tensor_ids) > j else -1
  return [int(d) for d in sg.tensors[i].shape] if i >= 0 else []


def op_scratch(model, op, kernels: str) -> list[int]:
  """The scratch buffers (bytes) `op` requests from TFLM under the kernel family."""
  sg = model.subgraphs[0]
  name, family = tg.op_name(model, op), KERNELS.index(kernels)
  # input, weights (or MEAN's axis; [] for one-input ops), output
  shapes = [_shape(sg, op.inputs, 0), _shape(sg, op.inputs, 1), _shape(sg, op.outputs, 0)]
  lib = scratch_size_library()
  if name in ("CONV_2D", "DEPTHWISE_CONV_2D"):
    return [_conv_scratch(lib, family, name, shapes, op.builtinOptions)]
  if name == "FULLY_CONNECTED" and len(shapes[2]) == 2:
    return [lib.forge_fully_connected_scratch(family, shapes[1][-1], shapes[2][-1])]
  if name == "FULLY_CONNECTED" and kernels.startswith("cmsis_nn"):
    # cmsis_nn/fully_connected.cc's 1x1-conv path (output rank > 2): per-tensor
    # requantization arrays (counted always), the 1x1 buffer being 0 with GCC.
    return [8 * shapes[2][-1]]
  if name == "AVERAGE_POOL_2D":
    return [lib.forge_avgpool_scratch(family, shapes[2][2], shapes[2][3])]
  if name == "SOFTMAX":  # esp_nn/softmax.cc reads dims[1] and dims[2] of the input
    return [lib.forge_softmax_scratch(family, shapes[0][1], (shapes[0] + [1, 1])[2])]
  if name == "MEAN":  # TFLM's reference reduce (every family): int8 accumulator etc.
    n_out = int(np.prod(shapes[2], dtype=np.int64))
    return [4 * n_out, 4 * len(shapes[0]), 4 * int(np.prod(shapes[1], dtype=np.int64))]
  return []


# ---------------------------------------------------------------------- the estimate

def _plan_inputs(model, manifest, kernels: str):
  """(tensor and scratch buffers as (bytes, first_op, last_op), persistent bytes)."""
  sg = model.subgraphs[0]
  n_ops = len(sg.operators)
  first: dict[int, int] = {int(i): 0 for i in sg.inputs}
  last: dict[int, int] = {int(i): n_ops - 1 for i in sg.outputs}
  persistent = EVAL_TENSOR_BYTES * len(sg.tensors)
  scratch: list[tuple[int, int, int]] = []
  forge_scratch = {s.op_index: s.memory.scratch_table for s in manifest.sites} if manifest else {}
  for k, op in enumerate(sg.operators):
    for i in op.inputs:
      if i >= 0 and tg.buffer_array(model, sg.tensors[i]) is None:
        last[int(i)] = max(last.get(int(i), k), k)
        first.setdefault(int(i), k)
    for o in op.outputs:
      first.setdefault(int(o), k)
      last[int(o)] = max(last.get(int(o), k), k)
    out_channels = int(sg.tensors[op.outputs[0]].shape[-1]) if len(op.outputs) else 1
    persistent += NODE_BYTES + 8 * out_channels
    scratch += [(b, k, k) for b in op_scratch(model, op, kernels) if b > 0]
    if k in forge_scratch:
      scratch.append((forge_scratch[k], k, k))
  buffers = [(_tensor_bytes(sg.tensors[i]), first[i], last[i]) for i in sorted(first)]
  if manifest is not None:
    persistent += manifest.memory_json()["arena_added_bytes_32bit"] * 2  # 64-bit bound
  return buffers + scratch, persistent


def arena_bytes(model_bytes: bytes, manifest=None, kernels: str | None = None) -> int:
  """A TFLM arena size (bytes, multiple of 1 KiB) that fits the model on targets
  registering `kernels` (one of KERNELS), or on every target (None, the default)."""
  model = tg.load_model(model_bytes)
  if kernels is None:
    return max(_arena_for(model, manifest, k) for k in KERNELS)
  if kernels not in KERNELS:
    raise ValueError(f"kernels={kernels!r}: one of {', '.join(KERNELS)}")
  return _arena_for(model, manifest, kernels)


def _arena_for(model, manifest, kernels: str) -> int:
  buffers, persistent = _plan_inputs(model, manifest, kernels)
  total = (greedy_plan(buffers) + persistent) * (1 + HEADROOM)
  return int(-(-total // 1024) * 1024)
