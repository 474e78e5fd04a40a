"""Wall time of FORGE evaluation / plain int8 inference over the same images.

Measured in one run, interleaved batch by batch (plain, forge, plain, forge, ...)
so that load on the shared machine hits both alike (pass-level interleaving let
the reference-mode ratio swing 0.9-1.17 between runs); both use the same
interpreter thread count. Prints the ratio per kernel mode and the
time of one full pass (all corruptions x N images, one ordering, cached
corruptions, optimized kernels) when --full_pass is given.

    python benchmarks/bench_eval_overhead.py --artifact=runs/r20_forge.tflite \
        --plain=runs/r20_int8.tflite --data_dir=../shared/datasets/cifar10
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from ai_edge_litert.interpreter import Interpreter

from forge_tflm.artifact import InputContract
from forge_tflm.data import load_dataset
from forge_tflm.ops import c_core_variant
from forge_tflm.runtime.segmented import KERNEL_MODES, SegmentedModel


def plain_runner(model_bytes: bytes, kernels: str, batch: int, num_threads: int):
  # Same thread count as SegmentedModel's interpreters, so the ratio measures
  # the FORGE overhead, not threading (LiteRT's default differs by build).
  it = Interpreter(model_content=model_bytes, num_threads=num_threads,
                   experimental_op_resolver_type=KERNEL_MODES[kernels])
  inp = it.get_input_details()[0]["index"]
  out = it.get_output_details()[0]["index"]
  it.resize_tensor_input(inp, [batch] + list(it.get_input_details()[0]["shape"][1:]))
  it.allocate_tensors()

  def run(x):
    if x.shape[0] != batch:  # Last partial batch.
      it.resize_tensor_input(inp, list(x.shape))
      it.allocate_tensors()
    it.set_tensor(inp, x)
    it.invoke()
    y = it.get_tensor(out)
    if x.shape[0] != batch:
      it.resize_tensor_input(inp, [batch] + list(x.shape[1:]))
      it.allocate_tensors()
    return y
  return run


def timed_pass(fn, x: np.ndarray, batch: int) -> float:
  t0 = time.perf_counter()
  for i in range(0, len(x), batch):
    fn(x[i:i + batch])
  return time.perf_counter() - t0


def timed_interleaved(fns, x: np.ndarray, batch: int) -> list[float]:
  """Total seconds of each fn over x, alternating the fns on every batch."""
  totals = [0.0] * len(fns)
  for i in range(0, len(x), batch):
    for k, fn in enumerate(fns):
      t0 = time.perf_counter()
      fn(x[i:i + batch])
      totals[k] += time.perf_counter() - t0
  return totals


def binding_overhead(forge: SegmentedModel, batch: np.ndarray, reps: int = 200):
  """Per-call cost of the Python binding: each node's `RecalibOp` called from a
  Python loop minus the same calls timed in a C loop (RecalibOp.bench), on the
  tensors one batch gives that node. Returns (us per call, us per batch)."""
  captured = []

  def capture(node, x, mode):
    captured.append((node, x.copy()))
    return node.op(x, mode=mode)

  forge.forge_kernel = capture
  forge.run(batch, mode="frozen")
  forge.forge_kernel = None
  per_call = []
  for node, x in captured:
    out = np.empty_like(x)
    c_ns = min(node.op.bench(x, reps, mode="frozen") for _ in range(3))
    py = []
    for _ in range(3):
      t0 = time.perf_counter_ns()
      for _ in range(reps):
        node.op(x, mode="frozen", out=out)
      py.append((time.perf_counter_ns() - t0) / reps)
    per_call.append(max(min(py) - c_ns, 0.0) / 1e3)
  return float(np.median(per_call)), float(np.sum(per_call))


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--artifact", required=True)
  p.add_argument("--plain", required=True, help="plain int8 model (convert --plain_output)")
  p.add_argument("--data_dir", required=True)
  p.add_argument("--images", type=int, default=2000)
  p.add_argument("--batch_size", type=int, default=64)
  p.add_argument("--repeats", type=int, default=3)
  p.add_argument("--kernels", default="optimized,reference")
  p.add_argument("--full_pass", action="store_true")
  args = p.parse_args()

  forge_bytes = open(args.artifact, "rb").read()
  plain_bytes = open(args.plain, "rb").read()
  test = load_dataset("cifar10", "test", args.data_dir)
  rng = np.random.default_rng(0)
  images = test.images[rng.permutation(len(test))[:args.images]]
  for kernels in args.kernels.split(","):
    forge = SegmentedModel(forge_bytes, kernels)
    x = forge.quantize_input(InputContract().to_float(images))
    plain = plain_runner(plain_bytes, kernels, args.batch_size, forge.num_threads)
    forge_fn = lambda b: forge.run(b, mode="adapt")
    n = min(len(x), 512 if kernels == "reference" else len(x))
    timed_pass(plain, x[:args.batch_size], args.batch_size)  # Warm-up.
    timed_pass(forge_fn, x[:args.batch_size], args.batch_size)
    tp, tf = [], []
    for _ in range(args.repeats):
      forge.reset()
      t_plain, t_forge = timed_interleaved([plain, forge_fn], x[:n], args.batch_size)
      tp.append(t_plain)
      tf.append(t_forge)
    tp, tf = min(tp), min(tf)
    print(f"{kernels:9s}: plain int8 {1e3 * tp / n:.3f} ms/img, FORGE eval"
          f" {1e3 * tf / n:.3f} ms/img, ratio {tf / tp:.3f} ({n} images, batch"
          f" {args.batch_size}, best of {args.repeats}, {forge.num_threads} thread(s)"
          f" each, C core {c_core_variant()})")
    if kernels == "optimized":
      call_us, batch_us = binding_overhead(forge, x[:args.batch_size])
      print(f"binding  : {call_us:.2f} us per FORGE call above the C loop (median of"
            f" {len(forge.nodes)} nodes), {batch_us:.1f} us per batch of"
            f" {args.batch_size} = {batch_us / (1e6 * tf / n * args.batch_size):.1%}"
            f" of the FORGE eval batch")
  if args.full_pass:
    from forge_tflm.corruptions import CORRUPTIONS, corrupt_cached
    forge = SegmentedModel(forge_bytes, "optimized")
    streams = [corrupt_cached(test.images, c, 5) for c in CORRUPTIONS]  # Cache warm-up.
    t0 = time.perf_counter()
    for stream in streams:
      forge.reset()
      order = rng.permutation(len(stream))
      timed_pass(lambda b: forge.run(b, mode="adapt"),
                 forge.quantize_input(InputContract().to_float(stream[order])),
                 args.batch_size)
    print(f"full pass: {len(CORRUPTIONS)} corruptions x {len(test)} images, optimized,"
          f" one ordering: {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
  main()
