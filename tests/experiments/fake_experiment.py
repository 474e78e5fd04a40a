"""A stand-in experiment for the runner's tests."""

import json
import os

from forge_tflm.experiments.common import Outcome


def _artifact(ctx) -> str:
  """A stand-in converted model whose manifest names its targets as convert would."""
  os.makedirs(ctx.artifact_dir, exist_ok=True)
  path = os.path.join(ctx.artifact_dir, "fake.tflite")
  with open(path, "wb") as f:
    f.write(b"TFL3")
  with open(path[:-len(".tflite")] + ".json", "w") as f:
    json.dump({"targets": {"source": ctx.convert.get("targets", "measured")}}, f)
  return path


def run(ctx):
  if ctx.images == 13:
    raise ValueError("bad experiment input")
  artifacts = (_artifact(ctx),) if ctx.images == 5 else ()
  return Outcome({"value": 1.5, "images": ctx.images}, "# fake\n\n| a |\n| --- |\n| 1 |",
                 lambda path: open(path, "wb").write(b"\x89PNG fake"), artifacts)
