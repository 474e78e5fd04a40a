"""Finding and recording Conv->BN sites in Keras models."""

import keras
import numpy as np
import pytest
from keras import layers

from forge_tflm.converter.frontend_keras import find_keras_sites, load_keras_model
from forge_tflm.converter.sites import ConversionError
from forge_tflm.models.mobilenet_v2 import mobilenet_v2
from forge_tflm.models.resnet_cifar import resnet20
from forge_tflm.testing import tiny_models


def test_tiny_model_sites_and_targets():
  model = tiny_models.tiny_resnet()
  sites = {s.name: s for s in find_keras_sites(model)}
  assert {n: (s.kind, s.activation, s.channels) for n, s in sites.items()} == \
      tiny_models.TINY_SITES
  bn = model.get_layer("stem_bn")
  np.testing.assert_array_equal(sites["stem_bn"].beta, bn.beta.numpy())
  np.testing.assert_array_equal(sites["stem_bn"].gamma_abs, np.abs(bn.gamma.numpy()))
  assert (sites["stem_bn"].gamma_abs >= 0).all()
  assert sites["dw_bn"].eps == pytest.approx(1e-3)
  assert sites["stem_bn"].folded_kernel.shape == (8, 3, 3, 3)   # TFLite OHWI.
  assert sites["dw_bn"].folded_kernel.shape == (1, 3, 3, 16)    # TFLite 1HWC.


def test_folded_kernel_reproduces_conv_bn_output():
  model = tiny_models.tiny_resnet()
  site = next(s for s in find_keras_sites(model) if s.name == "stem_bn")
  x = np.random.default_rng(0).normal(size=(2, 16, 16, 3)).astype(np.float32)
  bn = model.get_layer("stem_bn")
  want = bn(model.get_layer("stem_conv")(x), training=False).numpy()
  kernel = site.folded_kernel.transpose(1, 2, 3, 0)  # Back to HWIO.
  bias = bn.beta.numpy() - bn.moving_mean.numpy() * bn.gamma.numpy() / np.sqrt(
      bn.moving_variance.numpy() + bn.epsilon)
  got = keras.ops.conv(x, kernel, padding="same").numpy() + bias
  np.testing.assert_allclose(got, want, atol=1e-4)


def test_bundled_models():
  sites = find_keras_sites(resnet20())
  assert len(sites) == 21 and sum(s.channels for s in sites) == 784
  kinds = [s.kind for s in find_keras_sites(mobilenet_v2())]
  assert kinds.count("depthwise") == 17 and kinds.count("conv") == 35


def test_nested_and_sequential_models():
  names = [s.name for s in find_keras_sites(tiny_models.nested_model())]
  assert names == ["backbone/inner_bn", "head/seq_bn"]
  sites = find_keras_sites(tiny_models.nested_model())
  assert sites[0].activation == "relu" and sites[1].activation == "none"


def _model(*middle):
  x_in = keras.Input((8, 8, 3))
  x = layers.Conv2D(4, 3, name="conv")(x_in)
  for layer in middle:
    x = layer(x)
  x = layers.BatchNormalization(name="bn")(x)
  return keras.Model(x_in, layers.Flatten()(x))


def test_unsupported_layer_between_conv_and_bn():
  with pytest.raises(ConversionError, match="unsupported layer between conv conv and BN"
                     " bn: drop \\(Dropout\\)"):
    find_keras_sites(_model(layers.Dropout(0.1, name="drop")))


def test_conv_activation_before_bn_is_rejected():
  x_in = keras.Input((8, 8, 3))
  x = layers.Conv2D(4, 3, activation="relu", name="conv")(x_in)
  model = keras.Model(x_in, layers.BatchNormalization(name="bn")(x))
  with pytest.raises(ConversionError, match="relu activation before BN"):
    find_keras_sites(model)


def test_conv_feeding_more_than_bn_is_rejected():
  x_in = keras.Input((8, 8, 3))
  c = layers.Conv2D(4, 3, name="conv")(x_in)
  out = layers.Add()([layers.BatchNormalization(name="bn")(c), c])
  with pytest.raises(ConversionError, match="cannot be folded"):
    find_keras_sites(keras.Model(x_in, out))


def test_no_sites():
  x_in = keras.Input((8, 8, 3))
  model = keras.Model(x_in, layers.Conv2D(2, 3)(x_in), name="plain")
  with pytest.raises(ConversionError, match="no Conv->BatchNormalization sites"):
    find_keras_sites(model)


def test_load_errors(tmp_path):
  with pytest.raises(ConversionError, match="does not exist"):
    load_keras_model(str(tmp_path / "missing.keras"))
  bad = tmp_path / "bad.keras"
  bad.write_bytes(b"not a zip")
  with pytest.raises(ConversionError, match="cannot read Keras model"):
    load_keras_model(str(bad))


def test_truncated_keras_file_says_so_not_file_not_found(tmp_path):
  """Issue 20: Keras reported "File not found" for a .keras that exists but is cut."""
  from forge_tflm.converter.frontend_keras import load_keras_model
  from forge_tflm.converter.sites import ConversionError

  full = tmp_path / "full.keras"
  resnet20().save(str(full))
  cut = tmp_path / "cut.keras"
  cut.write_bytes(full.read_bytes()[:4000])
  with pytest.raises(ConversionError, match="cut.keras'.*not a .keras zip archive"):
    load_keras_model(str(cut))
