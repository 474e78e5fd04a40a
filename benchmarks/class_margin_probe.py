"""Class-balanced statistics with a confidence margin on the committed labels (probe).

Not a feature yet: it asks whether committing only confident predictions (top-1 minus
top-2 int8 logit >= T, else label -1: the image enters no class) cuts the pollution of
the class statistics by mispredicted images on label-correlated streams, and what it
costs on shuffled ones. The op is the real one (SegmentedModel, C core); only the label
rule of SegmentedModel.commit is replaced. Whole CIFAR-10 test split, severity 5,
batch 64, one ordering per corruption (seed [0, corruption index]).

    python benchmarks/class_margin_probe.py ORDER T1,T2,... [CORRUPTIONS]
      ORDER: shuffled | sorted | dirichlet:ALPHA; T in int8 units of the output
      (r20_balanced: 0.119 logits per unit). Prints per corruption: the int8 source,
      then one accuracy per T; then per T the corruptions hurt by more than 1 point.

Environment: FORGE_PROBE_ARTIFACT (default runs/r20_balanced.tflite, from
`forge_tflm convert ... --class_images=5000`), FORGE_PROBE_DATA (../shared/datasets/cifar10).
"""
import os
import sys

import numpy as np

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from forge_tflm.artifact import Artifact  # noqa: E402
from forge_tflm.corruptions import CORRUPTIONS, corrupt_cached  # noqa: E402
from forge_tflm.data import load_dataset  # noqa: E402
from forge_tflm.deploy import model_input  # noqa: E402
from forge_tflm.evaluation.field_streams import LabelOrder  # noqa: E402
from forge_tflm.ops import class_labels_s8  # noqa: E402
from forge_tflm.runtime.segmented import SegmentedModel  # noqa: E402

order_spec = sys.argv[1]
# "rF": relative: commit when the margin >= F x the running mean margin of the
# stream (per image, rate 1/64, starting at the first image's margin).
margins = sys.argv[2].split(",")
corrs = sys.argv[3].split(",") if len(sys.argv) > 3 else list(CORRUPTIONS)
art = Artifact.load(os.environ.get("FORGE_PROBE_ARTIFACT", os.path.join(
    REPO_ROOT, "runs", "r20_balanced.tflite")), require_manifest=True)
model = SegmentedModel.from_artifact(art, kernels="optimized")
test = load_dataset("cifar10", "test", os.environ.get("FORGE_PROBE_DATA", os.path.join(
    REPO_ROOT, "..", "shared", "datasets", "cifar10")))
labels = np.asarray(test.labels)
kind, _, alpha = order_spec.partition(":")
order = LabelOrder(kind, float(alpha) if alpha else None, 64)
res = {}
for ci, c in enumerate(corrs):
  x = model_input(art, corrupt_cached(test.images, c, 5, seed=0))
  model.reset()
  src = np.concatenate([model.run(x[s:s+500], mode="source") for s in range(0, len(x), 500)])
  acc_src = 100*(src.argmax(1) == labels).mean()
  idx = order.order(labels, np.random.default_rng([0, ci]))
  row = [acc_src]
  for T in margins:
    model.reset()
    running = [None]
    def commit(y, T=T):
      y = np.asarray(y).reshape(len(y), -1)
      lab = class_labels_s8(y)
      ys = np.sort(y.astype(np.int32), 1)
      marg = ys[:, -1] - ys[:, -2]
      if T.startswith("r"):
        keep = np.zeros(len(marg), bool)
        for i, m in enumerate(marg):
          running[0] = m if running[0] is None else running[0] + (m - running[0]) / 64
          keep[i] = m >= float(T[1:]) * running[0]
      else:
        keep = marg >= float(T)
      lab = np.where(keep, lab, -1).astype(np.int32)
      for node in model.nodes:
        if node.op.class_balanced:
          node.op.commit(lab)
    model.commit = commit
    corr = 0
    for s in range(0, len(idx), 64):
      b = idx[s:s+64]
      y = model.run(x[b], mode="adapt")
      corr += int((y.argmax(1) == labels[b]).sum())
    row.append(100*corr/len(idx))
  res[c] = row
  print(c, " ".join(f"{v:.1f}" for v in row), flush=True)
arr = np.array(list(res.values()))
print("mean", " ".join(f"{v:.1f}" for v in arr.mean(0)))
for j, T in enumerate(margins):
  d = arr[:, j+1] - arr[:, 0]
  print(f"T={T}: hurt {(d < -1).sum()}/{len(d)} worst {d.min():+.1f}")
