"""Times the FORGE_RECALIB C core on the 21 ResNet-20 BN sites at batch 64.

Sites (NHWC output of each former Conv->BN): stem + stage1's 6 convs at
32x32x16, stage2's 6 convs + projection at 16x16x32, stage3's 6 convs +
projection at 8x8x64. For each C variant (ansi: forge_recalib_s8_ansi, the
plain C reference; default: what the binding runs, forge_recalib_s8_x86 with
this CPU's AVX2/AVX-512 loops; avx2: the same capped at AVX2) and per-element
path (affine: per-channel A, B
per element; lut: per-channel 256-entry table) it reports the time per element
of a full adapt invocation (stats pass + update + per-element pass), of a
frozen invocation (per-element pass only), and the ratio to a plain memcpy of
the same bytes. Loops run in C (forge_tflm.ops._forge_recalib_core.bench_*),
so neither side pays Python overhead; each number is the minimum over repeats.

  python benchmarks/bench_recalib_core.py [--repeats 5] [--batch 64]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from forge_tflm import ops

RESNET20_SITES = ([("stem", 32, 32, 16)] +
                  [(f"stage1_conv{i}", 32, 32, 16) for i in range(6)] +
                  [(f"stage2_conv{i}", 16, 16, 32) for i in range(6)] +
                  [("stage2_proj", 16, 16, 32)] +
                  [(f"stage3_conv{i}", 8, 8, 64) for i in range(6)] +
                  [("stage3_proj", 8, 8, 64)])


def _min_time(fn, repeats: int) -> float:
  return min(fn() for _ in range(repeats))


def _site_inputs(rng, batch, h, w, c):
  x = np.clip(np.rint(rng.normal(-20, 25, size=(batch, h, w, c))), -128, 127)
  beta = rng.normal(0, 0.5, size=c).astype(np.float32)
  gamma = np.abs(rng.normal(1, 0.2, size=c)).astype(np.float32)
  return x.astype(np.int8), ops.RecalibState(beta, gamma)


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument("--batch", type=int, default=64)
  parser.add_argument("--reps", type=int, default=3,
                      help="core calls per timed sample")
  args = parser.parse_args(argv)
  if not ops.c_core_available():
    raise SystemExit("C core not built: pip install -e . --no-build-isolation")

  rng = np.random.default_rng(0)
  opts = ops.RecalibOptions(momentum=0.1, activation="relu")
  quant = ops.QuantParams(s_x=0.05, z_x=-10, s_y=0.04, z_y=-128)
  sites = [(name, *_site_inputs(rng, args.batch, h, w, c))
           for name, h, w, c in RESNET20_SITES]
  total_elems = sum(x.size for _, x, _ in sites)

  results = {}
  t_start = time.perf_counter()
  for variant in ("ansi", "avx2", "default"):
    for path in ("affine", "lut"):
      for mode in ("adapt", "frozen"):
        ns = 0.0
        for _, x, state in sites:
          op = ops.RecalibOp(opts, quant, state.beta, state.gamma_abs, state=state)
          ns += _min_time(lambda: op.bench(x, args.reps, mode=mode, path=path,
                                           variant=variant), args.repeats)
        results[(variant, path, mode)] = ns
  memcpy_ns = sum(_min_time(lambda: ops.bench_memcpy(x.size, args.reps),
                            args.repeats) for _, x, _ in sites)

  print(f"FORGE_RECALIB C core, ResNet-20 sites, batch {args.batch}: "
        f"{len(sites)} sites, {total_elems} int8 elements per forward pass; "
        f"variant default = {ops.c_core_variant()}")
  print(f"memcpy of the same bytes: {memcpy_ns / 1e6:.3f} ms/forward, "
        f"{memcpy_ns / total_elems:.3f} ns/element")
  print(f"{'variant':8s} {'path':8s} {'mode':7s} {'ms/forward':>11s} "
        f"{'ns/element':>11s} {'x memcpy':>9s}")
  for (variant, path, mode), ns in results.items():
    print(f"{variant:8s} {path:8s} {mode:7s} {ns / 1e6:11.3f} "
          f"{ns / total_elems:11.3f} {ns / memcpy_ns:9.2f}")
  best = min(("affine", "lut"), key=lambda p: results[("default", p, "adapt")])
  from forge_tflm.ops import _forge_recalib_core as core
  print(f"faster per-element path on this host (adapt): {best}; this build's "
        f"auto path uses the table when N*H*W >= {core.LUT_MIN_M}")
  print(f"(min of {args.repeats} repeats x {args.reps} calls; "
        f"bench took {time.perf_counter() - t_start:.1f} s)")


if __name__ == "__main__":
  main()
