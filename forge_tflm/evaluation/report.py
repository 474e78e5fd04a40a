"""Evaluation results as a table: JSON, CSV, Markdown and a PNG chart.

Accuracy is in percent, mean +- std over orderings. Recovery is a method's
accuracy minus its own source's (int8 methods vs `source`, float methods vs
`source-fp32`) on the same stream; a stream a method "hurts" is one where its
mean recovery is more than HURT_POINTS below zero (eval's --hurt_threshold): the
one definition the output, the field benchmarks and the docs use.
"""

from __future__ import annotations

import csv
import io
import json
import os

import numpy as np

from forge_tflm.evaluation.protocol import SOURCE_OF
from forge_tflm.fileio import write_atomically

# Points under the method's own source that count as hurting a stream: below one
# point, a 2,000-image stream's difference is within one ordering's noise.
HURT_POINTS = 1.0


def hurt_streams(recovery: dict[str, float], threshold: float = HURT_POINTS) -> list[str]:
  """The streams whose mean recovery (points) is more than `threshold` below zero."""
  return [s for s, r in recovery.items() if r < -threshold]


def _several_orderings(table: dict) -> bool:
  """Whether any row holds more than one ordering (else std and error bars say nothing)."""
  return any(len(row["accuracy"]) > 1 for t in table.values() for row in t["streams"].values())


def summarize(raw: dict, hurt_threshold: float = HURT_POINTS) -> dict:
  acc = raw["accuracy"]
  streams = list(next(iter(acc.values())).keys()) if acc else []
  table = {}
  for method, per_stream in acc.items():
    rows = {}
    source = SOURCE_OF[method]
    for s in streams:
      a = 100.0 * np.asarray(per_stream[s])
      row = {"accuracy_mean": float(a.mean()), "accuracy_std": float(a.std()),
             "accuracy": [float(v) for v in a]}
      if source in acc and source != method:
        rec = a - 100.0 * np.asarray(acc[source][s])
        row["recovery_mean"] = float(rec.mean())
        row["recovery_std"] = float(rec.std())
      rows[s] = row
    corrupted = [s for s in streams if s != "clean"]
    summary = {
        "mean_accuracy": float(np.mean([rows[s]["accuracy_mean"] for s in corrupted]))
        if corrupted else None}
    if corrupted and "recovery_mean" in rows[corrupted[0]]:
      # Per-ordering mean over corruptions, then mean/std over orderings.
      per_order = np.mean([np.asarray(rows[s]["accuracy"]) -
                           100.0 * np.asarray(acc[source][s]) for s in corrupted], axis=0)
      summary["mean_recovery"] = float(per_order.mean())
      summary["mean_recovery_std"] = float(per_order.std())
      summary["hurt"] = hurt_streams({s: rows[s]["recovery_mean"] for s in corrupted},
                                     hurt_threshold)
      summary["hurt_threshold"] = hurt_threshold
    table[method] = {"streams": rows, "summary": summary}
  return table


def to_csv(table: dict) -> str:
  out = io.StringIO()
  w = csv.writer(out)
  w.writerow(["method", "stream", "accuracy_mean", "accuracy_std", "recovery_mean",
              "recovery_std"])
  for method, t in table.items():
    for stream, row in t["streams"].items():
      w.writerow([method, stream, f"{row['accuracy_mean']:.2f}", f"{row['accuracy_std']:.2f}",
                  f"{row['recovery_mean']:.2f}" if "recovery_mean" in row else "",
                  f"{row['recovery_std']:.2f}" if "recovery_std" in row else ""])
  return out.getvalue()


def to_markdown(table: dict, gate: dict | None = None,
                gate_periodic: dict | None = None) -> str:
  methods = list(table)
  streams = list(next(iter(table.values()))["streams"]) if table else []
  lines = ["| stream | " + " | ".join(methods) + " |",
           "| --- | " + " | ".join("---:" for _ in methods) + " |"]
  several = _several_orderings(table)
  for s in streams:
    cells = []
    for m in methods:
      row = table[m]["streams"][s]
      cell = f"{row['accuracy_mean']:.1f}"
      cell += f" ± {row['accuracy_std']:.1f}" if several else ""
      if "recovery_mean" in row:
        cell += f" ({row['recovery_mean']:+.1f})"
      cells.append(cell)
    fired = ""
    if gate_periodic and s in gate_periodic:  # Re-probing: the share it adapted.
      fired = (" (gate adapted: " + ",".join(f"{a:.0%}" for a in gate_periodic[s]["adapted"])
               + ")")
    elif gate and s in gate:
      fired = " (gate: " + ",".join("on" if f else "off" for f in gate[s]) + ")"
    lines.append(f"| {s}{fired} | " + " | ".join(cells) + " |")
  mean_cells = []
  for m in methods:
    su = table[m]["summary"]
    cell = f"{su['mean_accuracy']:.1f}" if su["mean_accuracy"] is not None else ""
    if su.get("mean_recovery") is not None:
      cell += (f" ({su['mean_recovery']:+.1f} ± {su['mean_recovery_std']:.1f})" if several
               else f" ({su['mean_recovery']:+.1f})")
    mean_cells.append(cell)
  lines.append("| **mean (corrupted)** | " + " | ".join(mean_cells) + " |")
  hurt = {m: table[m]["summary"].get("hurt") for m in methods
          if table[m]["summary"].get("hurt")}
  thresholds = {table[m]["summary"].get("hurt_threshold") for m in methods} - {None}
  points = thresholds.pop() if len(thresholds) == 1 else HURT_POINTS
  lines.append("")
  lines.append(("Accuracy % mean ± std over orderings" if several else
                "Accuracy % (one ordering)") + "; (recovery vs the method's source)."
               f" Hurt = more than {points:g} point{'' if points == 1 else 's'} under the"
               " source:"
               + (" " + "; ".join(f"{m}: {', '.join(h)}" for m, h in hurt.items())
                  if hurt else " none."))
  return "\n".join(lines) + "\n"


def plot_png(table: dict, title: str = "") -> bytes:
  """Per-stream accuracy bars and the mean over corrupted streams, as PNG bytes.

  Error bars (std over orderings) only where there is more than one ordering.
  """
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  methods = list(table)
  streams = list(next(iter(table.values()))["streams"])
  labels = streams + ["mean"]
  x = np.arange(len(labels))
  width = 0.8 / max(1, len(methods))
  fig, ax = plt.subplots(figsize=(min(14, max(8, 0.2 * len(labels) * len(methods))), 5))
  several = _several_orderings(table)
  for i, m in enumerate(methods):
    rows = [table[m]["streams"][s] for s in streams]
    heights = [r["accuracy_mean"] for r in rows] + [table[m]["summary"]["mean_accuracy"]
                                                    or 0.0]
    yerr = [r["accuracy_std"] for r in rows] + [0.0] if several else None
    ax.bar(x + (i - (len(methods) - 1) / 2) * width, heights, width, yerr=yerr, label=m,
           capsize=2 if several else 0)
  ax.axvline(len(streams) - 0.5, color="grey", lw=0.8)
  ax.set_xticks(x, labels, rotation=45, ha="right")
  ax.set_ylabel("top-1 accuracy (%)")
  ax.set_ylim(0, 100)
  ax.legend(ncol=len(methods), fontsize=8, loc="lower center", bbox_to_anchor=(0.5, 1.0),
            frameon=False)
  fig.suptitle(title, fontsize=9)
  ax.grid(axis="y", alpha=0.3)
  fig.tight_layout()
  buf = io.BytesIO()
  fig.savefig(buf, format="png", dpi=120)
  plt.close(fig)
  return buf.getvalue()


def plot_title(meta: dict) -> str:
  """Model, stream and batch: what a reader of the chart needs first."""
  model = os.path.basename(meta.get("artifact", {}).get("path") or
                           meta.get("float_model", {}).get("path") or "")
  config = meta.get("config", {})
  orderings = config.get("orderings", 1)
  return "\n".join(p for p in (
      model, meta.get("data", ""),
      f"batch {config.get('batch_size', '?')}, {orderings} ordering"
      + ("s" if orderings != 1 else "") + "; 'mean' = mean over corrupted streams") if p)


def domains_markdown(domains: dict) -> str:
  """Per stream that crosses domains: each method's accuracy inside each domain."""
  out = []
  for stream, per_method in domains.items():
    methods = list(per_method)
    names = list(next(iter(per_method.values())))
    out += ["", f"Stream {stream}, accuracy % per domain (mean ± std over orderings):", "",
            "| domain | " + " | ".join(methods) + " |",
            "| --- | " + " | ".join("---:" for _ in methods) + " |"]
    for d in names:
      cells = [f"{100 * np.mean(per_method[m][d]):.1f} ± {100 * np.std(per_method[m][d]):.1f}"
               for m in methods]
      out.append(f"| {d} | " + " | ".join(cells) + " |")
  return "\n".join(out) + "\n"


def write_all(out_dir: str, table: dict, meta: dict, raw: dict) -> dict[str, str]:
  """Writes results.json/.csv/.md/.png into out_dir; returns their paths."""
  paths = {k: os.path.join(out_dir, f"results.{k}") for k in ("json", "csv", "md", "png")}
  doc = dict(meta)
  doc["results"] = table
  doc["gate"] = {"fired": raw.get("gate", {}), "score": raw.get("gate_score", {})}
  if raw.get("gate_periodic"):
    doc["gate"]["periodic"] = raw["gate_periodic"]
  doc["seconds"] = raw.get("seconds", {})
  markdown = to_markdown(table, raw.get("gate"), raw.get("gate_periodic"))
  if raw.get("domains"):
    doc["domains"] = raw["domains"]
    markdown += domains_markdown(raw["domains"])
  write_atomically({paths["json"]: (json.dumps(doc, indent=2) + "\n").encode(),
                    paths["csv"]: to_csv(table).encode(),
                    paths["md"]: markdown.encode(),
                    paths["png"]: plot_png(table, plot_title(meta))})
  return paths
