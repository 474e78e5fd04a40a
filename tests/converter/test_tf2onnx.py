"""tf2onnx (the product card's Keras -> ONNX tool) on the bundled ResNet-20.

tf2onnx 1.17.0 cannot keep BatchNormalization: Keras 3 computes BN as arithmetic
after the conv, and TensorFlow's graph optimization folds it into the conv weights
before tf2onnx sees it (disabling tf2onnx's own Conv+BN fusion changes nothing; checked).
So its ONNX of a trained Keras model is the "already folded" case: the converter must
refuse it with a one-line reason, not write a model without sites.
"""

import collections
import os

import pytest

from forge_tflm.converter.frontend_onnx import find_onnx_sites
from forge_tflm.converter.sites import ConversionError
from tests.conftest import REPO_ROOT

tf2onnx = pytest.importorskip("tf2onnx", reason="needs tf2onnx (requirements-nodeps.txt)")


def test_tf2onnx_export_of_the_bundled_resnet20_is_refused_as_folded(tmp_path):
  import onnx
  import tensorflow as tf

  from forge_tflm.converter.frontend_keras import load_keras_model

  keras_model = load_keras_model(os.path.join(REPO_ROOT, "models", "resnet20_cifar10.keras"))
  proto, _ = tf2onnx.convert.from_function(
      tf.function(lambda x: keras_model(x, training=False)),
      input_signature=[tf.TensorSpec([1, 32, 32, 3], tf.float32, name="input")], opset=17)
  ops = collections.Counter(n.op_type for n in proto.graph.node)
  assert ops["Conv"] == 21 and ops["BatchNormalization"] == 0, ops
  path = str(tmp_path / "r20_tf2onnx.onnx")
  onnx.save(proto, path)
  with pytest.raises(ConversionError, match="has no BatchNormalization nodes") as e:
    find_onnx_sites(onnx.load(path))
  assert "tf2onnx always folds BN" in str(e.value) and "\n" not in str(e.value)
