"""A stand-in experiment for the runner's tests."""

from forge_tflm.experiments.common import Outcome


def run(ctx):
  if ctx.images == 13:
    raise ValueError("bad experiment input")
  return Outcome({"value": 1.5, "images": ctx.images}, "# fake\n\n| a |\n| --- |\n| 1 |",
                 lambda path: open(path, "wb").write(b"\x89PNG fake"))
