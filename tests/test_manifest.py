"""The manifest: one schema, and every field the model states checked against it
(issue 34). Editing only the `.json` keeps the model's sha256 valid: each case edits
one field of a genuine seed artifact's manifest (forge_tflm/testing/manifest_fuzz: the
fuzz seeds, "two_sites" with two FORGE sites, one label-safe) and expects a
one-line ArtifactError naming the manifest file and the field. Before, each of these
loaded (and, for the firmware export, sized the arena from the edited field) or
raised a traceback (RecursionError, OverflowError-like ValueErrors).
"""

import json
import os

import pytest

from forge_tflm.artifact import Artifact, ArtifactError
from forge_tflm.testing import manifest_fuzz as mf


def _artifact(tmp_path, seed="two_sites", edit=None, text=None):
  model = mf.SEEDS[seed]()
  path = tmp_path / f"{seed}.tflite"
  path.write_bytes(model)
  doc = mf.seed_manifest(model)
  if edit is not None:
    edit(doc)
  raw = text(mf.dumps(doc)) if text is not None else mf.dumps(doc)
  (tmp_path / f"{seed}.json").write_text(raw)
  return str(path), str(tmp_path / f"{seed}.json")


def _site(k, **kw):
  def edit(doc):
    doc["sites"][k].update(kw)
  return edit


def _options(k, *drop, **kw):
  def edit(doc):
    for key in drop:
      del doc["sites"][k]["options"][key]
    doc["sites"][k]["options"].update(kw)
  return edit


def _set(path, value):
  def edit(doc):
    *parents, last = path
    target = doc
    for p in parents:
      target = target[p]
    target[last] = value
  return edit


def _dup_site(doc):
  doc["sites"].append(dict(doc["sites"][0]))


CASES = {
    "label_safe_stripped": (_options(0, "label_safe"),
                            r"field sites\[0\]\.options\.label_safe is absent, but"
                            r" operator 1's options have 1"),
    "label_safe_set": (_options(1, label_safe=1),
                       r"field sites\[1\]\.options\.label_safe is 1, but operator 3"),
    "removed_option_classes": (_options(1, classes=10),
                               r"sites\[1\]\.options.*classes"),
    "channels_65536": (_site(0, channels=65536),
                       r"field sites\[0\]\.channels is 65536, but operator 1 has 8"),
    "channels_-1000": (_site(0, channels=-1000),
                       r"field sites\[0\]: channels must be an integer in \[1, 65536\],"
                       r" not -1000"),
    "channels_-1": (_site(1, channels=-1), r"sites\[1\]: channels must be an integer"),
    "site_name_not_a_string": (_site(0, name=7),
                               r"field sites\[0\]\.name: must be a non-empty string"),
    "scale_nan": (_set(("sites", 0, "input_quantization", "scale"), mf.Raw("NaN")),
                  r"not JSON we read \(NaN is not a number JSON allows\)"),
    "scale_zero": (_set(("sites", 1, "output_quantization", "scale"), 0),
                   r"field sites\[1\]\.output_quantization: scale must be a finite number"
                   r" > 0, not 0"),
    "scale_edited": (_set(("input", "quantization", "scale"), 0.004),
                     r"field input\.quantization is scale 0\.004, zero point -128, but the"
                     r" model's input tensor 'image'"),
    "duplicated_site": (_dup_site, r"sites: name 'bn@1' twice"),
    "reordered_sites": (lambda d: d["sites"].reverse(),
                        r"sites must be in the model's operator order"),
    "bn_eps_zero": (_site(0, bn_eps=0), r"sites\[0\]: bn_eps must be a finite number in"
                                        r" \(0, 1\], not 0"),
    "bn_eps_negative": (_site(1, bn_eps=-1e-5), r"bn_eps must be a finite number"),
    "bn_eps_huge": (_site(1, bn_eps=1e300), r"bn_eps must be a finite number"),
    "infinity": (_set(("sites", 0, "bn_eps"), mf.Raw("Infinity")),
                 r"Infinity is not a number JSON allows"),
    "number_out_of_range": (_set(("sites", 0, "preact_saturated_fraction"),
                                 mf.Raw("1e999")), r"number 1e999 is out of range"),
    "huge_integer": (_set(("model_bytes",), mf.Raw("1" + "0" * 5000)),
                     r"integer of 5001 digits"),
    "deep_nesting": (_set(("calibration",), mf.nest(100000)), r"nested more than 64"),
    "contract_empty_list": (_set(("input", "contract"), []),
                            r"field input\.contract: must be an object, not a list"),
    "op_index_not_forge": (_site(0, op_index=0),
                           r"field sites\[0\]\.op_index is 0, but the model's FORGE_RECALIB"
                           r" operators are \[1, 3\]"),
    "site_dropped": (lambda d: d["sites"].pop(), r"field sites is without operator 3"),
    "momentum_edited": (_options(0, momentum=0.5),
                        r"sites\[0\]\.options\.momentum is 0\.5, but operator 1's options"
                        r" have 0\.1"),
    "tensor_renamed": (_site(1, input_tensor="dw"),
                       r"sites\[1\]\.input_tensor is 'dw', but operator 3's input is"
                       r" tensor 'dw/pre'"),
    "kind_edited": (_site(1, kind="conv"),
                    r"sites\[1\]\.kind is 'conv', but operator 3's input is written by"
                    r" DEPTHWISE_CONV_2D"),
    "model_bytes_edited": (_set(("model_bytes",), 12), r"field model_bytes is 12"),
    "derived_state_bytes": (_site(0, state_bytes=1),
                            r"field sites\[0\]\.state_bytes: is 1, but the manifest's"
                            r" sites give"),
    "derived_totals": (_set(("totals", "memory", "arena_added_bytes_32bit"), 0),
                       r"field totals\.memory\.arena_added_bytes_32bit: is 0"),
    "unknown_field": (_site(0, clases=10), r"field sites\[0\]\.clases: unknown field"),
    "targets_measured_without_images": (_set(("targets",), {"source": "measured"}),
                                        r"targets: images must be an integer >= 1"),
    "targets_unknown_source": (_set(("targets",), {"source": "guessed"}),
                               r"targets must be \{'source': one of recorded, measured\}"),
    # Failed before: accepted, and eval's accuracy fell silently (pixels 0..255 into a
    # model quantized for 0..1 saturate).
    "contract_does_not_fit_the_quantization": (
        _set(("input", "quantization", "scale"), 0.5),
        r"input contract --input_range=0,1 gives floats in \[0, 1\], but the model's input"
        r" is quantized for \[0, 127\.5\]"),
    "contract_high_255": (_set(("input", "contract", "high"), 255.0),
                          r"input contract --input_range=0,255 gives floats in \[0, 255\],"
                          r" but the model's input is quantized for \[0, 1\]"),
    "contract_too_narrow": (_set(("input", "contract", "high"), 0.01),
                            r"input contract --input_range=0,0.01 .* not the contract"),
    "contract_normalize_wrong": (_set(("input", "contract"), {
        "kind": "normalize", "mean": [0.5, 0.5, 0.5], "std": [0.01, 0.01, 0.01]}),
                                 r"input contract --input_mean=0.5,0.5,0.5"),
    "site_not_found": (_set(("bn_sites_found",), ["bn@1"]),
                       r"site \['bn@3'\] is not among bn_sites_found"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_edited_manifest_is_refused_naming_file_and_field(tmp_path, case):
  edit, message = CASES[case]
  path, mpath = _artifact(tmp_path, edit=edit)
  with pytest.raises(ArtifactError) as e:
    Artifact.load(path)
  msg = str(e.value)
  assert "\n" not in msg and msg.startswith(mpath), msg
  assert __import__("re").search(message, msg), msg


def test_a_key_written_twice_is_refused(tmp_path):
  path, mpath = _artifact(tmp_path, text=lambda t: t.replace(
      '"channels": 8,', '"channels": 9, "channels": 8,', 1))
  with pytest.raises(ArtifactError, match=f"^{mpath}: not JSON we read \\(key 'channels'"
                                          " appears twice"):
    Artifact.load(path)


@pytest.mark.parametrize("seed", sorted(mf.SEEDS))
def test_the_genuine_manifests_load(tmp_path, seed):
  path, _ = _artifact(tmp_path, seed)
  manifest = Artifact.load(path, require_manifest=True).manifest
  assert manifest.targets == {"source": "recorded"}  # Absent: recorded.


@pytest.mark.parametrize("targets", [{"source": "recorded"},
                                     {"source": "measured", "images": 500}])
def test_targets_provenance_is_accepted(tmp_path, targets):
  path, _ = _artifact(tmp_path, "device", edit=_set(("targets",), targets))
  assert Artifact.load(path).manifest.targets == targets


def test_free_form_names_are_kept(tmp_path):
  """Sites converted from a .tflite name their conv by its tensor name."""
  path, _ = _artifact(tmp_path, edit=_site(0, conv="model/conv2d/Conv2D;bias"))
  assert Artifact.load(path).manifest.sites[0].conv == "model/conv2d/Conv2D;bias"
  assert os.path.exists(path)


def test_the_manifest_round_trips(tmp_path):
  path, mpath = _artifact(tmp_path)
  manifest = Artifact.load(path).manifest
  with open(mpath) as f:
    assert manifest.to_json() == json.load(f) | {"targets": {"source": "recorded"}}


@pytest.mark.parametrize("ext", [".keras", ".h5", ".onnx"])
def test_a_float_model_given_as_artifact_names_the_convert_step(tmp_path, ext):
  path = str(tmp_path / f"model{ext}")
  with open(path, "wb") as f:
    f.write(b"\0" * 64)
  with pytest.raises(ArtifactError, match=r"float model.*forge_tflm convert --model="):
    Artifact.load(path)
