"""Label-safe sites (converter/label_safety.py): the sites at the input resolution adapt
under label correlation, marked by option label_safe and stated in the manifest."""

import pytest

from forge_tflm import tflite_graph as tg
from forge_tflm.ops import decode_options
from forge_tflm.testing import tiny_models


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
  return tiny_models.convert_tiny(tmp_path_factory.mktemp("safe"))[1]


def test_sites_at_the_largest_feature_map_are_label_safe(converted):
  model = tg.load_model(converted.tflite)
  sg = model.subgraphs[0]
  area, safe = {}, {}
  for op in sg.operators:
    if tg.op_name(model, op) == tg.FORGE_RECALIB:
      shape = sg.tensors[op.inputs[0]].shape
      name = sg.tensors[op.outputs[0]].name
      area[name] = int(shape[1] * shape[2])
      safe[name] = decode_options(bytes(op.customOptions)).label_safe == 1
  top = max(area.values())
  assert safe == {n: a == top for n, a in area.items()}
  assert any(safe.values()) and not all(safe.values())  # The tiny model downsamples.


def test_the_manifest_states_which_sites_are_label_safe(converted):
  by_name = {s["name"]: s["options"].get("label_safe") for s in converted.manifest.to_json()[
      "sites"]}
  assert by_name["stem_bn"] == 1 and by_name["b2_bn"] is None

