"""The bundled architectures have the Conv->BN sites the product relies on."""

import keras
import numpy as np
import pytest

from forge_tflm.models import build_model
from forge_tflm.models.mobilenet_v2 import mobilenet_v2
from forge_tflm.models.resnet_cifar import resnet20


def conv_bn_sites(model: keras.Model) -> dict[str, tuple[str, int]]:
  """BN layer name -> (class of the conv feeding it, channels), from the model config."""
  layers = {l.name: l for l in model.layers}
  sites = {}
  for cfg in model.get_config()["layers"]:
    if cfg["class_name"] != "BatchNormalization":
      continue
    (node,) = cfg["inbound_nodes"]
    (arg,) = node["args"]
    producer = layers[arg["config"]["keras_history"][0]]
    if isinstance(producer, (keras.layers.Conv2D, keras.layers.DepthwiseConv2D)):
      bn = layers[cfg["name"]]
      sites[cfg["name"]] = (type(producer).__name__, int(bn.gamma.shape[0]))
  return sites


def test_resnet20_sites_and_size():
  model = resnet20()
  sites = conv_bn_sites(model)
  assert len(sites) == 21
  assert sum(c for _, c in sites.values()) == 784
  assert sum("proj" in name for name in sites) == 2
  assert 0.26e6 < model.count_params() < 0.28e6
  bns = [l for l in model.layers if isinstance(l, keras.layers.BatchNormalization)]
  assert len(bns) == len(sites)  # Every BN follows a conv.
  assert model.output_shape == (None, 10)


@pytest.mark.parametrize("size", [32, 64])
def test_mobilenet_v2_half_width_sites(size):
  model = mobilenet_v2(0.5, num_classes=200 if size == 64 else 10,
                       input_shape=(size, size, 3))
  sites = conv_bn_sites(model)
  kinds = [k for k, _ in sites.values()]
  assert kinds.count("DepthwiseConv2D") == 17  # One per inverted-residual block.
  # Pointwise: 16 expansions (the first block has t=1), 17 projections, plus stem, head.
  assert kinds.count("Conv2D") == 16 + 17 + 2
  bns = [l for l in model.layers if isinstance(l, keras.layers.BatchNormalization)]
  assert len(bns) == len(sites)
  relu6 = [l for l in model.layers if isinstance(l, keras.layers.ReLU)]
  assert relu6 and all(float(l.max_value) == 6.0 for l in relu6)
  # Final feature map is 4x4 at both input sizes.
  head = model.get_layer("head_relu").output
  assert tuple(head.shape[1:3]) == (4, 4)
  out = model(np.zeros((2, size, size, 3), np.float32))
  assert out.shape == (2, 200 if size == 64 else 10)


def test_build_model_rejects_unknown_name():
  with pytest.raises(ValueError, match="unknown model"):
    build_model("vgg", 10)


def test_resnet_depth_must_be_6n_plus_2():
  from forge_tflm.models.resnet_cifar import resnet_cifar
  with pytest.raises(ValueError, match="6n\\+2"):
    resnet_cifar(21)


def test_weight_decay_adds_l2_losses():
  model = resnet20(weight_decay=5e-4)
  model(np.zeros((1, 32, 32, 3), np.float32))
  assert len(model.losses) == 22  # 21 convs + the classifier.
