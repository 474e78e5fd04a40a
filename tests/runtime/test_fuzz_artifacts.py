"""Mutation fuzz of artifacts through the evaluator's loading path, in CI (issue 20).

4,000 mutants of the two seed artifacts (forge_tflm/testing/artifact_fuzz.py: byte and
bit flips, aligned-word overwrites, truncations, structured mutations of shapes,
indices, types, scales, zero points, buffers, options), each run in its own child
forked from a fork server (Artifact.load, SegmentedModel.from_artifact, one
inference), on two workers: zero aborts, segfaults, hangs (20 s per mutant), other
exceptions or multi-line messages, and every rejection comes from the validator
(forge_tflm.model_check), none from LiteRT. 11-12 ms of CPU per mutant: about 25 s of
wall time on 2 idle cores; benchmarks/fuzz_artifacts.py runs 100,000
(benchmarks/results/superseded/fuzz_artifacts.txt).
"""


from forge_tflm.testing import artifact_fuzz as af
from tests.conftest import fuzz_slice

MUTANTS = fuzz_slice(4_000)


def _describe(records):
  return "\n".join(f"#{r['index']} {r['seed']}/{r['mutator']} ({r['kernels']}): {r['desc']}"
                   f" -> {r['outcome']}: {r['message'][:300]} {r.get('file', '')}"
                   f"\n{r.get('stderr', '')[-500:]}" for r in records[:20])


def test_fuzz_artifacts_no_crash_hang_or_unclean_error(tmp_path):
  summary = af.fuzz(MUTANTS, workers=2, run_seed=0, workdir=str(tmp_path))
  assert summary["worker_exit_codes"] == [0, 0], summary
  assert summary["mutants"] == MUTANTS, summary
  counts = summary["counts"]
  assert not summary["findings"], (
      f"{len(summary['findings'])} mutants crashed, hung or raised an unclean error"
      f" ({counts}); reproduce with python -m forge_tflm.testing.artifact_fuzz --load FILE:\n"
      + _describe(summary["findings"]))
  assert set(counts) <= {"ok", "rejected"}, counts
  # Each rejection is the validator's: LiteRT never sees an invalid model.
  assert summary["rejected_not_by_validator"] == [], (
      "rejected after validation (add a validator rule):\n"
      + _describe(summary["rejected_not_by_validator"]))
  # The mix stays meaningful: most mutants are invalid, a good share still runs.
  assert counts.get("rejected", 0) > MUTANTS // 2 and counts.get("ok", 0) > MUTANTS // 20
  assert set(summary["by_mutator"]) == set(af.MUTATORS)
  assert set(summary["by_seed"]) == set(af.SEEDS)
