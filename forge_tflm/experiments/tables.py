"""Experiments that are views of one `forge_tflm eval` run: `baselines` (the paper's
Table 3: every method's mean accuracy and recovery over the 15 corruptions, 5
orderings, mean +- std), `per-corruption` (Table 4: the same run per corruption) and
`gate` (Table 8: FORGE with the gate on each corruption and on the clean stream, where
adapting can only cost).

baselines and per-corruption share one evaluation (common.cached_evaluate).
"""

from __future__ import annotations

from forge_tflm.experiments.common import (BUNDLED_MODELS, ExperimentContext, Outcome,
                                           bundled_artifact, cached_evaluate,
                                           corrupted_streams, grouped_bars, plot)

METHODS = ("source", "forge", "forge-gated", "scale-adapt", "source-fp32", "bn-adapt",
           "tent")
ORDERINGS = 5
IMAGES = 2000  # per stream unless --images (--images=0: the whole split, ~35 min on 2 workers)


def _baseline_doc(ctx: ExperimentContext):
  from forge_tflm.evaluation.protocol import EvalConfig  # pylint: disable=import-outside-toplevel

  artifact = bundled_artifact(ctx)
  _, streams = corrupted_streams(ctx, images=IMAGES)
  config = EvalConfig(methods=METHODS, orderings=ORDERINGS)
  keras_model = BUNDLED_MODELS["resnet20_cifar10"]
  return (cached_evaluate(ctx, config, streams, artifact, keras_model), artifact,
          len(streams[0].labels))


def _setting(n: int) -> str:
  return (f"ResNet-20 (bundled; int8 methods on the converted artifact, fp32 methods on"
          f" the Keras model), 15 corruptions at severity 5, {n} test images each, batch"
          f" 64, {ORDERINGS} shuffled orderings (mean +- std over orderings). Recovery:"
          " int8 methods against the int8 source, fp32 methods against the fp32 source.")


def run_baselines(ctx: ExperimentContext) -> Outcome:
  doc, artifact, n = _baseline_doc(ctx)
  rows = {m: doc["results"][m]["summary"] for m in METHODS}
  lines = ["# baselines: every method over the 15 corruptions (paper Table 3)", "",
           _setting(n), "",
           "| method | mean accuracy | recovery (points) | corruptions hurt |",
           "| --- | ---: | ---: | ---: |"]
  for m in METHODS:
    r = rows[m]
    rec = (f"{r['mean_recovery']:+.2f} ± {r['mean_recovery_std']:.2f}"
           if r.get("mean_recovery") is not None else "")
    hurt = f"{len(r['hurt'])}/15" if "hurt" in r else ""
    lines.append(f"| {m} | {r['mean_accuracy']:.2f} | {rec} | {hurt} |")
  lines += ["", "The paper's Table 3 values are not available in this checkout."]
  data = {"methods": list(METHODS), "summary": rows, "images_per_stream": n,
          "orderings": ORDERINGS, "seconds": doc["seconds"]}
  return Outcome(data, "\n".join(lines), lambda p: _bars(rows, p), (artifact,))


def run_per_corruption(ctx: ExperimentContext) -> Outcome:
  from forge_tflm.evaluation.report import to_markdown  # pylint: disable=import-outside-toplevel

  doc, artifact, n = _baseline_doc(ctx)
  lines = ["# per-corruption: every method on each corruption (paper Table 4)", "",
           _setting(n) + " Cells: accuracy mean ± std (recovery).", "",
           to_markdown(doc["results"], doc["gate"]), "",
           "The paper's Table 4 values are not available in this checkout."]
  data = {"results": doc["results"], "gate": doc["gate"], "images_per_stream": n,
          "orderings": ORDERINGS}
  groups = {s: {m: doc["results"][m]["streams"][s].get("recovery_mean")
                for m in METHODS if m not in ("source", "source-fp32")}
            for s in doc["results"]["source"]["streams"]}
  return Outcome(data, "\n".join(lines), lambda p: grouped_bars(
      p, groups, "recovery (points)", "each method against its own source",
      size=(10, 3.6)), (artifact,))


def run_gate(ctx: ExperimentContext) -> Outcome:
  from forge_tflm.evaluation.protocol import EvalConfig  # pylint: disable=import-outside-toplevel
  from forge_tflm.evaluation.report import to_markdown  # pylint: disable=import-outside-toplevel
  from forge_tflm.experiments.common import evaluate  # pylint: disable=import-outside-toplevel

  artifact = bundled_artifact(ctx)
  clean, streams = corrupted_streams(ctx, include_clean=True)
  config = EvalConfig(methods=("source", "forge", "forge-gated"))
  doc = evaluate(ctx, config, streams, artifact)
  gated = doc["results"]["forge-gated"]
  fired = {s: bool(v[0]) for s, v in doc["gate"].items()}
  corrupted = [s for s in fired if s != "clean"]
  kept = 100 * gated["summary"]["mean_recovery"] / doc["results"]["forge"]["summary"][
      "mean_recovery"]
  lines = ["# gate: when FORGE keeps adapting (paper Table 8)", "",
           f"ResNet-20 (bundled), the gate's default rule, 15 corruptions at severity 5"
           f" and the clean stream, {len(clean.labels)} test images each, batch 64, one"
           " shuffled ordering.", "", to_markdown(doc["results"], doc["gate"]), "",
           f"The gate adapted on {sum(fired[s] for s in corrupted)}/15 corruptions and"
           f" {'did' if fired.get('clean') else 'did not'} adapt on the clean stream;"
           f" FORGE + gate keeps {kept:.1f}% of FORGE's recovery and hurts"
           f" {len(gated['summary']['hurt'])}/15 corruptions (FORGE:"
           f" {len(doc['results']['forge']['summary']['hurt'])}/15).", "",
           "The paper's Table 8 values are not available in this checkout."]
  data = {"results": doc["results"], "gate": doc["gate"], "fired": fired,
          "recovery_kept_percent": kept, "images_per_stream": int(len(clean.labels))}
  groups = {s: {m: doc["results"][m]["streams"][s]["recovery_mean"]
                for m in ("forge", "forge-gated")} for s in fired}
  return Outcome(data, "\n".join(lines), lambda p: grouped_bars(
      p, groups, "recovery (points)", "FORGE with and without the gate",
      size=(10, 3.6)), (artifact,))


def _bars(rows: dict, path: str) -> None:
  names = [m for m in rows if rows[m].get("mean_recovery") is not None]
  with plot(path, (6, 3.2)) as ax:
    ax.bar(names, [rows[m]["mean_recovery"] for m in names],
           yerr=[rows[m]["mean_recovery_std"] for m in names], capsize=3)
    ax.axhline(0, color="gray", lw=0.8)
    ax.set_ylabel("recovery (points)")
    ax.tick_params(axis="x", labelsize=8)
