"""`lotv` (the paper's appendix table): the share of a site's variance the EMA of
batch statistics omits, by batch size.

By the law of total variance, a channel's variance over the stream is the mean
within-batch variance plus the variance of the batch means. An EMA of batch
variances alone estimates only the first; the omitted share is
Var_b(mean_b) / (E_b[var_b] + Var_b(mean_b)). Measured on the int8 model's FORGE
sites (the dequantized conv outputs the op sees, model as converted) over the 15
evaluation streams at severity 5, per site and channel, then averaged over channels,
sites and streams. Batches are consecutive images of one shuffled order; the per-image
moments are computed once and combined for every batch size.
"""

from __future__ import annotations

import numpy as np

from forge_tflm.experiments.common import (ExperimentContext, Outcome, bundled_artifact,
                                           corrupted_streams, plot, site_moments)

BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64)
# The paper's figures quoted in the issue: batch 1 and batch 64 only.
PAPER = {1: 7.96, 64: 0.11}


def omitted_share(mean: np.ndarray, square: np.ndarray, batch: int) -> float:
  """Mean over channels of Var_b(mean_b) / total for consecutive batches of `batch`
  images (a trailing partial batch is dropped); per-image (mean, mean square) [N, C]."""
  n = (len(mean) // batch) * batch
  m = mean[:n].reshape(-1, batch, mean.shape[1]).mean(1)  # batch means [B, C]
  s = square[:n].reshape(-1, batch, mean.shape[1]).mean(1)
  within = (s - m * m).mean(0)
  between = m.var(0)
  total = within + between
  ok = total > 1e-12  # constant channels (dead ReLU inputs) carry no information
  return float(np.mean(between[ok] / total[ok]))


def run(ctx: ExperimentContext) -> Outcome:
  from forge_tflm.artifact import Artifact  # pylint: disable=import-outside-toplevel
  from forge_tflm.runtime.inputs import model_input  # pylint: disable=import-outside-toplevel
  from forge_tflm.evaluation.protocol import ordering  # pylint: disable=import-outside-toplevel
  from forge_tflm.runtime.segmented import SegmentedModel  # pylint: disable=import-outside-toplevel

  path = bundled_artifact(ctx)
  artifact = Artifact.load(path, require_manifest=True)
  model = SegmentedModel.from_artifact(artifact, "optimized")
  _, streams = corrupted_streams(ctx, images=2000)
  per_site = {b: {} for b in BATCH_SIZES}  # batch -> site -> [share per stream]
  for stream in streams:
    order = ordering(len(stream.labels), 0, 0)
    moments = site_moments(model, model_input(artifact, stream.images[order]))
    for site, (mean, square) in moments.items():
      for b in BATCH_SIZES:
        per_site[b].setdefault(site, []).append(omitted_share(mean, square, b))
  sites = list(per_site[1])
  share = {b: 100 * float(np.mean([np.mean(v) for v in per_site[b].values()]))
           for b in BATCH_SIZES}
  data = {"batch_sizes": list(BATCH_SIZES), "omitted_percent": share,
          "per_site_percent": {b: {s: 100 * float(np.mean(v)) for s, v in
                                   per_site[b].items()} for b in BATCH_SIZES},
          "images_per_stream": int(len(streams[0].labels)), "sites": sites,
          "paper": PAPER,
          "comparisons": [{"claim": f"variance omitted at batch {b} (%)", "paper": v,
                           "here": share[b]} for b, v in PAPER.items()]}
  return Outcome(data, _markdown(data), lambda p: _figure(data, p), (path,))


def _markdown(d: dict) -> str:
  lines = ["# lotv: variance the EMA of batch statistics omits (paper appendix)", "",
           f"ResNet-20 (bundled), {len(d['sites'])} FORGE sites, 15 corruptions at severity"
           f" 5, {d['images_per_stream']} test images each; share = Var(batch means) /"
           " total, mean over channels, sites and corruptions.", "",
           "| batch | omitted (here) | paper |", "| ---: | ---: | ---: |"]
  for b in d["batch_sizes"]:
    p = d["paper"].get(b)
    lines.append(f"| {b} | {d['omitted_percent'][b]:.2f}% | "
                 f"{f'{p:.2f}%' if p is not None else 'n/a'} |")
  lines += ["", "The paper's values are those quoted in issue 19 (batch 1 and 64); the"
            " others are not available in this checkout.", "", "## Per site", "",
            "| site | " + " | ".join(f"b={b}" for b in d["batch_sizes"]) + " |",
            "| --- | " + " | ".join("---:" for _ in d["batch_sizes"]) + " |"]
  for s in d["sites"]:
    lines.append(f"| {s} | " + " | ".join(
        f"{d['per_site_percent'][b][s]:.2f}%" for b in d["batch_sizes"]) + " |")
  return "\n".join(lines)


def _figure(d: dict, path: str) -> None:
  with plot(path, (5, 3.4)) as ax:
    b = d["batch_sizes"]
    ax.plot(b, [d["omitted_percent"][k] for k in b], "o-", label="here")
    ax.plot(list(d["paper"]), list(d["paper"].values()), "kx", ms=8, label="paper")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch size")
    ax.set_ylabel("variance omitted (%)")
    ax.legend(fontsize=8)
