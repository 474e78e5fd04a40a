"""`activation` (the paper's Fig. 3): one channel clean, corrupted and recalibrated.

At every FORGE site of the bundled ResNet-20 the conv output the op sees is captured
(dequantized) on clean test images and on the same images under a corruption
(default gaussian_noise, severity 5). The channel shown is the one whose corrupted
mean moves furthest from its clean mean, in clean standard deviations. The
recalibrated values are the corrupted ones normalized with the state FORGE reached
at that site adapting alone over the corrupted stream (batch 64, the artifact's
options; every other site as converted, so the op saw exactly these values) and
mapped back to the clean targets: (x - mu) / sqrt(var + eps) * |gamma| + beta.
"""

from __future__ import annotations

import numpy as np

from forge_tflm.experiments.common import (ExperimentContext, Outcome, bundled_artifact,
                                           eval_clean, plot)

CORRUPTION = "gaussian_noise"


def _capture(model, x, site: str, mode: str, batch: int = 64) -> np.ndarray:
  """The dequantized op inputs at `site` [N*H*W, C], the model running in `mode`."""
  got = []

  def hook(node, xb, m):
    if node.name == site:
      q = node.quant
      got.append((xb.reshape(-1, xb.shape[-1]).astype(np.float64) - q.z_x) * q.s_x)
    return node.op(xb, mode=m)

  model.forge_kernel = hook
  try:
    for start in range(0, len(x), batch):
      model.run(x[start:start + batch], mode=mode)
  finally:
    model.forge_kernel = None
  return np.concatenate(got)


def run(ctx: ExperimentContext) -> Outcome:
  from forge_tflm.artifact import Artifact  # pylint: disable=import-outside-toplevel
  from forge_tflm.corruptions import corrupt_cached  # pylint: disable=import-outside-toplevel
  from forge_tflm.runtime.inputs import model_input  # pylint: disable=import-outside-toplevel
  from forge_tflm.experiments.common import site_moments  # pylint: disable=import-outside-toplevel
  from forge_tflm.runtime.segmented import SegmentedModel  # pylint: disable=import-outside-toplevel

  path = bundled_artifact(ctx)
  artifact = Artifact.load(path, require_manifest=True)
  model = SegmentedModel.from_artifact(artifact, "optimized")
  clean = eval_clean(ctx, images=2000)
  x_clean = model_input(artifact, clean.images)
  x_bad = model_input(artifact, corrupt_cached(clean.images, CORRUPTION, 5))
  # Pick the channel from per-image moments (cheap), then capture only that site.
  shift = {}
  for (site, (mc, sc)), (_, (mb, _)) in zip(site_moments(model, x_clean).items(),
                                            site_moments(model, x_bad).items()):
    mean_clean = mc.mean(0)
    std_clean = np.sqrt(np.maximum(sc.mean(0) - mean_clean ** 2, 0))
    ok = std_clean > 1e-6
    d = np.where(ok, (mb.mean(0) - mean_clean) / np.where(ok, std_clean, 1), 0)
    ch = int(np.argmax(np.abs(d)))
    shift[site] = (ch, float(d[ch]))
  site = max(shift, key=lambda s: abs(shift[s][1]))
  ch = shift[site][0]
  node = next(n for n in model.nodes if n.name == site)
  clean_v = _capture(model, x_clean, site, "source")[:, ch]
  model.reset()
  model.adapt_only([site])  # upstream as converted: the op sees the corrupted values
  bad_v = _capture(model, x_bad, site, "adapt")
  model.adapt_only(None)
  c = node.state.channels
  mu, var = node.state.data[:c].astype(np.float64), node.state.data[c:].astype(np.float64)
  beta = node.state.beta.astype(np.float64)
  gamma = node.state.gamma_abs.astype(np.float64)
  recal = ((bad_v - mu) / np.sqrt(var + node.options.eps) * gamma + beta)[:, ch]
  bad_v = bad_v[:, ch]
  model.reset()
  m0, s0 = float(clean_v.mean()), float(clean_v.std())

  def moved(v):
    return {"mean": float(v.mean()), "std": float(v.std()),
            "displacement_sigma": (float(v.mean()) - m0) / s0, "std_ratio": float(v.std()) / s0}

  data = {"corruption": CORRUPTION, "severity": 5, "images": int(len(clean.labels)),
          "site": site, "channel": ch, "clean": moved(clean_v), "corrupted": moved(bad_v),
          "recalibrated": moved(recal),
          "largest_shift_per_site": {s: {"channel": v[0], "sigma": v[1]}
                                     for s, v in shift.items()}}
  samples = {k: v[np.random.default_rng(0).permutation(len(v))[:200000]] for k, v in
             (("clean", clean_v), ("corrupted", bad_v), ("recalibrated", recal))}
  return Outcome(data, _markdown(data), lambda p: _figure(data, samples, p), (path,))


def _markdown(d: dict) -> str:
  lines = ["# activation: one channel clean, corrupted and recalibrated (paper Fig. 3)", "",
           f"ResNet-20 (bundled), site {d['site']}, channel {d['channel']} (the largest"
           f" clean-sigma shift of any channel under {d['corruption']} severity"
           f" {d['severity']}), {d['images']} test images; values are the dequantized"
           " conv output the op sees.", "",
           "| distribution | mean | std | displacement (clean sigma) | std / clean std |",
           "| --- | ---: | ---: | ---: | ---: |"]
  for k in ("clean", "corrupted", "recalibrated"):
    v = d[k]
    lines.append(f"| {k} | {v['mean']:.3f} | {v['std']:.3f} | "
                 f"{v['displacement_sigma']:+.2f} | {v['std_ratio']:.2f} |")
  lines += ["", "The paper's figure values are not available in this checkout; the"
            " claim compared is qualitative: corruption displaces the channel by several"
            " sigma and recalibration brings it back to the clean distribution."]
  return "\n".join(lines)


def _figure(d: dict, samples: dict, path: str) -> None:
  with plot(path, (6, 3.4)) as ax:
    lo = min(np.percentile(v, 0.5) for v in samples.values())
    hi = max(np.percentile(v, 99.5) for v in samples.values())
    for k, v in samples.items():
      ax.hist(v, bins=40, range=(lo, hi), density=True, histtype="step", lw=1.4,
              label=f"{k} ({d[k]['displacement_sigma']:+.1f} sigma)")
    ax.set_xlabel(f"{d['site']} channel {d['channel']} (conv output)")
    ax.set_ylabel("density")
    ax.set_title(f"{d['corruption']}, severity {d['severity']}")
    ax.legend(fontsize=8)
