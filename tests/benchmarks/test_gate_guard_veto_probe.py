"""benchmarks/gate_guard_veto_probe.py builds forge_tflm eval's streams: label orders
parse to the evaluator's LabelOrder (Dirichlet slots of one batch) and bad ones fail."""

import pytest

from forge_tflm.evaluation.field_streams import LabelOrder
from tests.benchmarks import benchmark_script


@pytest.fixture(scope="module")
def probe():
  with benchmark_script("gate_guard_veto_probe") as module:
    yield module


def test_label_orders_are_the_evaluators(probe):
  assert probe.label_order("shuffled", 1) == LabelOrder("shuffled")
  assert probe.label_order("sorted", 64) == LabelOrder("sorted")
  assert probe.label_order("dirichlet0.01", 1) == LabelOrder("dirichlet", 0.01, slot=1)
  assert probe.label_order("dirichlet0.1", 64) == LabelOrder("dirichlet", 0.1, slot=64)
  with pytest.raises(ValueError):
    probe.label_order("camera", 64)
  with pytest.raises(ValueError):
    probe.label_order("dirichlet-1", 64)
