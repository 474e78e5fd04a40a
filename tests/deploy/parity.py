"""The parity rule every device target is held to, image by image (one definition for
the host and Cortex-M tests): every op's output (FORGE and the logits included) and
every FORGE op's float32 state after every image equal the evaluator's
(forge_tflm.deploy.expected_outputs, reference kernels = TFLM's arithmetic)."""

from __future__ import annotations

import numpy as np


def check_parity(label: str, run, exp, explain=None) -> int:
  """Asserts the rule for a parsed device run against the expected outputs; returns
  the number of images with identical logits. explain(n, k) -> str describes a
  differing op output (asked for the first three)."""
  n_images = len(exp.logits)
  assert run.ok, (label, run.errors)
  assert run.ops == exp.op_names and run.forge_ops == exp.forge_ops, label
  assert run.logits.shape == exp.logits.shape, (label, run.logits.shape)
  problems = []
  for n, k in zip(*np.nonzero(run.op_checksums != exp.op_checksums)):
    how = f": {explain(int(n), int(k))}" if explain is not None and len(problems) < 3 else ""
    problems.append(f"image {n}: op {k} ({exp.op_names[k]}) output differs{how}")
    if len(problems) > 20:
      break
  assert np.array_equal(run.forge_checksums, exp.forge_checksums) or problems, \
      f"{label}: FORGE checksums differ although every op checksum matched"
  if exp.forge_ops:
    assert run.state_checksums is not None, "the app did not find FORGE's state buffers"
    for n, f in zip(*np.nonzero(run.state_checksums != exp.state_checksums)):
      problems.append(f"image {n}: state of FORGE op {exp.forge_ops[f]} differs")
      if len(problems) > 40:
        break
  for n in range(n_images):
    for c in np.nonzero(run.logits[n] != exp.logits[n])[0]:
      d = int(run.logits[n][c]) - int(exp.logits[n][c])
      problems.append(f"image {n}: logit {c}: device {run.logits[n][c]} vs evaluator"
                      f" {exp.logits[n][c]} ({d:+d} LSB)")
  assert not problems, f"{label}:\n" + "\n".join(problems)
  return int(np.sum(np.all(run.logits == exp.logits, axis=1)))
