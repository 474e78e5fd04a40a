"""`selective` (the paper's Fig. 4): adapting a few layers, chosen at design time.

On the bundled ResNet-20 (all sites converted):
  1. rank the sites by recovery alone on the held-out corruptions (training images);
  2. rank them again on the 15 evaluation corruptions (the oracle: it sees them);
  3. for k = 1..all, measure on the 15 evaluation corruptions (test split) the
     recovery of the held-out top-k and of the oracle top-k;
  4. pick the best held-out subset without the evaluation data (the k whose top-k is
     best on the held-out streams) and compare it with all sites;
  5. convert the held-out top-3 as its own artifact and measure it, to check the
     subset simulation (unselected sites in source mode) against the real thing.
"""

from __future__ import annotations

import numpy as np

from forge_tflm.corruptions import CORRUPTIONS
from forge_tflm.evaluation import selection
from forge_tflm.experiments.common import (ExperimentContext, Outcome, bundled_artifact,
                                           plot)

# The paper's Fig. 4 claims (ResNet-20, CIFAR-10-C severity 5).
PAPER = {"top3_share_of_all": 93.0, "best_subset_k": 8, "best_subset_recovery": 19.6,
         "all_sites_recovery": 18.4, "all_sites": 21}
TOP = 3


def _curve(ctx, artifact, ranked, streams, source, what):
  subsets = [tuple(ranked[:k]) for k in range(1, len(ranked))]
  acc = selection.measure_subsets(artifact, streams, subsets, executor=ctx.executor,
                                  what=what, progress=ctx.progress)
  return [100 * float(np.mean([a[c] - source[c] for c in source])) for a in acc]


def run(ctx: ExperimentContext) -> Outcome:
  artifact = bundled_artifact(ctx)
  held = selection.SelectConfig()
  held_streams = held.streams(ctx.data_dir)
  eval_streams = [selection.StreamSpec(c, ctx.data_dir, split="test", images=ctx.images)
                  for c in CORRUPTIONS]
  kw = dict(executor=ctx.executor, progress=ctx.progress)
  held_rank = selection.rank_sites(artifact, held_streams, **kw)
  oracle = selection.rank_sites(artifact, eval_streams, **kw)
  n = len(oracle.sites)
  all_rec = oracle.recovery(oracle.all_sites)
  curves = {}
  for name, ranking in (("held-out", held_rank), ("oracle", oracle)):
    curves[name] = _curve(ctx, artifact, ranking.ranked(), eval_streams, oracle.source,
                          f"{name} top-k on evaluation") + [all_rec]
  held_curve = _curve(ctx, artifact, held_rank.ranked(), held_streams, held_rank.source,
                      "held-out top-k on held-out") + [held_rank.recovery(held_rank.all_sites)]
  best_k = int(np.argmax(held_curve)) + 1  # chosen without evaluation data
  oracle_k = int(np.argmax(curves["oracle"])) + 1
  top = held_rank.ranked()[:TOP]
  subset_artifact = bundled_artifact(ctx, sites=[s for s in held_rank.sites if s in top])
  real = selection.measure_subsets(subset_artifact, eval_streams, [(), None],
                                   what="converted top-3", **kw)
  real_rec = 100 * float(np.mean([real[1][c] - real[0][c] for c in CORRUPTIONS]))
  share = 100 * curves["held-out"][TOP - 1] / all_rec
  data = {
      "sites": list(oracle.sites),
      "held_out": {"corruptions": list(held.corruptions), "split": held.split,
                   "images": held.images, "ranking": held_rank.to_json(),
                   "ranked": held_rank.ranked(), "top_k_recovery": held_curve},
      "evaluation": {"corruptions": list(CORRUPTIONS), "split": "test",
                     "images": ctx.images or "all", "ranking": oracle.to_json(),
                     "ranked": oracle.ranked()},
      "top_k_recovery": curves, "all_sites_recovery": all_rec,
      "source_accuracy": 100 * float(np.mean(list(oracle.source.values()))),
      "top3_share_of_all": share,
      "best_held_out_subset": {"k": best_k, "recovery": curves["held-out"][best_k - 1]},
      "best_oracle_subset": {"k": oracle_k, "recovery": curves["oracle"][oracle_k - 1]},
      "converted_top3": {"sites": top, "artifact": subset_artifact,
                         "recovery": real_rec,
                         "simulated_recovery": curves["held-out"][TOP - 1]},
      "paper": PAPER,
      "comparisons": [
          {"claim": "held-out top-3: share of all-site recovery (%)",
           "paper": PAPER["top3_share_of_all"], "here": share},
          {"claim": "best held-out subset: recovery (points)",
           "paper": PAPER["best_subset_recovery"], "here": curves["held-out"][best_k - 1]},
          {"claim": "all sites: recovery (points)", "paper": PAPER["all_sites_recovery"],
           "here": all_rec},
      ],
  }
  return Outcome(data, markdown(data, n), lambda path: figure(data, n, path),
                 (artifact, subset_artifact))


def markdown(d: dict, n: int) -> str:
  """The report of `run`'s data `d` (`n` sites): each paper claim next to ours."""
  c = d["top_k_recovery"]
  all_rec = d["all_sites_recovery"]
  bh, bo, ct = d["best_held_out_subset"], d["best_oracle_subset"], d["converted_top3"]
  p = PAPER
  lines = [
      "# selective: adapting a few sites chosen at design time (paper Fig. 4)", "",
      f"ResNet-20 (bundled), {n} FORGE sites; recovery = mean accuracy gain over the int8"
      f" source ({d['source_accuracy']:.2f}%) on the 15 evaluation corruptions, severity 5,"
      f" test split ({d['evaluation']['images']} images each), batch 64, one shuffled"
      f" ordering. Held-out ranking: {', '.join(d['held_out']['corruptions'])} on"
      f" {d['held_out']['images']} training images. Subsets are measured on the all-sites"
      " artifact with the other sites in source mode.", "",
      "## Against the paper", "",
      "| claim | paper | here |", "| --- | ---: | ---: |",
      f"| held-out top-3, share of all-site recovery | {p['top3_share_of_all']:.0f}% |"
      f" {d['top3_share_of_all']:.1f}% |",
      f"| best subset chosen on held-out data (k, recovery) | {p['best_subset_k']},"
      f" +{p['best_subset_recovery']} | {bh['k']}, {bh['recovery']:+.2f} |",
      f"| all sites (k, recovery) | {p['all_sites']}, +{p['all_sites_recovery']} |"
      f" {n}, {all_rec:+.2f} |",
      f"| best oracle subset (k, recovery) | | {bo['k']}, {bo['recovery']:+.2f} |",
      f"| held-out top-3 converted as its own artifact | | {ct['recovery']:+.2f}"
      f" (simulated {ct['simulated_recovery']:+.2f}) |", "",
      "## Recovery by k (points)", "",
      "| k | held-out top-k | % of all | oracle top-k | % of all |",
      "| ---: | ---: | ---: | ---: | ---: |"]
  for k in range(1, n + 1):
    h, o = c["held-out"][k - 1], c["oracle"][k - 1]
    lines.append(f"| {k} | {h:+.2f} | {100 * h / all_rec:.0f}% | {o:+.2f} |"
                 f" {100 * o / all_rec:.0f}% |")
  lines += ["", "## Rankings", "", "| rank | held-out | recovery alone | oracle |"
            " recovery alone |", "| ---: | --- | ---: | --- | ---: |"]
  hr, orr = d["held_out"]["ranking"], d["evaluation"]["ranking"]
  for i, (a, b) in enumerate(zip(d["held_out"]["ranked"], d["evaluation"]["ranked"]), 1):
    lines.append(f"| {i} | {a} | {hr['recovery_alone'][a]:+.2f} | {b} |"
                 f" {orr['recovery_alone'][b]:+.2f} |")
  return "\n".join(lines)


def figure(d: dict, n: int, path: str) -> None:
  """Draws top-k recovery of both rankings against all `n` sites into `path`."""
  ks = np.arange(1, n + 1)
  with plot(path, (6, 3.6)) as ax:
    for name, style in (("held-out", "o-"), ("oracle", "s--")):
      ax.plot(ks, d["top_k_recovery"][name], style, ms=3, label=f"{name} ranking, top-k")
    ax.axhline(d["all_sites_recovery"], color="gray", lw=1, label=f"all {n} sites")
    ax.set_xlabel("sites adapted (k)")
    ax.set_ylabel("recovery over int8 source (points)")
    ax.set_title("ResNet-20, 15 corruptions, severity 5")
    ax.legend(fontsize=8)
