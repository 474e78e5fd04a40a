"""Mutation fuzz of resume files in CI (issue 53): 2,000 mutated stream records
(forge_tflm/testing/resume_fuzz.py) through what `eval --resume` runs on them. Each is
refused in one line naming the file, or accepted only if its run could have written
it (gate entries that agree, the run's methods and domains); within a CPU second.
benchmarks/fuzz_sites_resume.py runs 10,000 and more
(benchmarks/results/fuzz_sites_resume.txt)."""

import math

from forge_tflm.testing import resume_fuzz as rf
from tests.conftest import fuzz_slice

MUTANTS = fuzz_slice(2_000)


def test_the_oracle_sees_impossible_gate_records():
  fingerprint = {"config": {"methods": ["forge-gated"], "orderings": 1,
                            "gate": {"period": 8}},
                 "streams": [{"name": "s", "images": 16, "domains": []}]}
  record = {"stream": "s", "images": 16, "accuracy": {"forge-gated": [0.5]},
            "seconds": {"forge-gated": 0.1}, "gate_fired": [True], "gate_score": [0.2],
            "gate_correlated": [False], "gate_adapted": [0.5], "gate_probed": [0.5],
            "gate_decisions": [1]}
  assert rf.impossible(record, fingerprint) is None
  assert rf.impossible(dict(record, gate_decisions=[0]), fingerprint)
  assert rf.impossible(dict(record, gate_score=[math.nan]), fingerprint)
  assert rf.impossible(dict(record, domain_accuracy={}), fingerprint)


def test_fuzz_resume_files(tmp_path):
  summary = rf.fuzz(MUTANTS, workdir=str(tmp_path))
  counts = summary["counts"]
  assert sum(counts.values()) == MUTANTS
  assert not summary["findings"], "\n".join(
      f"#{r['index']} {r['seed']}/{r['mutator']}: {r['desc']} -> {r['outcome']}:"
      f" {r['message'][:300]}" for r in summary["findings"][:10])
  assert set(summary["by_mutator"]) == set(rf.MUTATORS), summary["by_mutator"]
  assert set(summary["by_seed"]) == {"periodic", "once", "nogate"}
  assert counts.get("rejected", 0) > MUTANTS // 2 and counts.get("ok", 0) > MUTANTS // 20
