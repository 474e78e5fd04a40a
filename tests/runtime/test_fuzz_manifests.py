"""Mutation fuzz of manifests through the loading path, in CI (issue 34).

10,000 mutants of the seed artifacts' manifests (forge_tflm/testing/manifest_fuzz.py: type
swaps, deletions, NaN / inf / huge numbers, deep nesting, duplicated / reordered /
dropped sites, edited channels, label_safe, options, scales, tensors and kinds, unknown
fields, duplicated keys, damaged text), on two workers: every one is accepted with
exactly what its model states, or refused with one line naming the manifest file;
no traceback, crash or hang, and no manifest that contradicts its model is accepted.
About 1.5 ms per mutant (15-30 s on the shared CI host); benchmarks/fuzz_manifests.py
runs 100,000 (benchmarks/results/fuzz_manifests.txt).
"""


from forge_tflm.testing import manifest_fuzz as mf
from tests.conftest import fuzz_slice

MUTANTS = fuzz_slice(10_000)


def test_fuzz_manifests_no_traceback_crash_or_contradiction(tmp_path):
  summary = mf.fuzz(MUTANTS, workers=2, run_seed=0, workdir=str(tmp_path))
  assert summary["mutants"] == MUTANTS and summary["worker_exit_codes"] == [0, 0], summary
  counts = summary["counts"]
  assert not summary["findings"], "\n".join(
      f"#{r['index']} {r['seed']}/{r['mutator']}: {r['desc']} -> {r['outcome']}:"
      f" {r['message'][:300]} {r.get('file', '')}" for r in summary["findings"][:20])
  assert set(counts) <= {"ok", "rejected"}, counts
  # The mix stays meaningful: most mutants are refused, a share is still valid.
  assert counts["rejected"] > MUTANTS // 2 and counts["ok"] > MUTANTS // 20, counts
  assert set(summary["by_mutator"]) == set(mf.MUTATORS)
  assert set(summary["by_seed"]) == set(mf.SEEDS)
