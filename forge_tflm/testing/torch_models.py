"""PyTorch networks of the kinds people ship, with random weights (nothing downloaded).

  ResNet20A: the widely used CIFAR ResNet-20 with option-A shortcuts (the identity
    shortcut subsamples with x[:, :, ::2, ::2] and zero-pads the channels), 19 BN;
    `normalize` puts (x/255 - mean)/std inside the model.
  MobileNetV2: torchvision's structure (inverted residuals: 1x1 expand + BN + ReLU6,
    3x3 depthwise + BN + ReLU6, 1x1 project + BN, residual when shapes allow; last
    1x1 conv + BN + ReLU6, average pool, dropout, linear) at a small width.
  AkamasterResNet: the public akamaster CIFAR ResNet written as it is (a LambdaLayer
    option-A shortcut, `_make_layer` returning nn.Sequential, `F.avg_pool2d(out,
    out.size()[3])`, `out.view(out.size(0), -1)`), one block per stage.
  ResNetB: option-B shortcuts (1x1 conv + BN in an nn.Sequential),
    `F.adaptive_avg_pool2d` and a head
    flattened by `head` ("reshape_shape0": `x.reshape(x.shape[0], -1)`,
    "reshape_minus1": `x.reshape(-1, n)`, "flatten": `torch.flatten(x, 1)`).

`calibrate_bn` gives every BN the statistics of real inputs (then random gamma/beta),
so activations are as well scaled as in a trained model and int8 agreement means
something.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)


class _Subsample(nn.Module):
  def __init__(self, planes: int):
    super().__init__()
    self.pad = planes // 4

  def forward(self, x):
    return F.pad(x[:, :, ::2, ::2], (0, 0, 0, 0, self.pad, self.pad), "constant", 0)


class _BasicBlock(nn.Module):
  def __init__(self, inp: int, planes: int, stride: int):
    super().__init__()
    self.conv1 = nn.Conv2d(inp, planes, 3, stride, 1, bias=False)
    self.bn1 = nn.BatchNorm2d(planes)
    self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
    self.bn2 = nn.BatchNorm2d(planes)
    self.shortcut = _Subsample(planes) if stride != 1 or inp != planes else nn.Identity()

  def forward(self, x):
    out = F.relu(self.bn1(self.conv1(x)))
    out = self.bn2(self.conv2(out))
    return F.relu(out + self.shortcut(x))


class ResNet20A(nn.Module):
  def __init__(self, normalize: bool = False, classes: int = 10):
    super().__init__()
    self.normalize = normalize
    self.register_buffer("mean", torch.tensor(CIFAR_MEAN).view(1, 3, 1, 1))
    self.register_buffer("std", torch.tensor(CIFAR_STD).view(1, 3, 1, 1))
    self.conv1 = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
    self.bn1 = nn.BatchNorm2d(16)
    blocks, inp = [], 16
    for planes, stride in ((16, 1), (32, 2), (64, 2)):
      for i in range(3):
        blocks.append(_BasicBlock(inp, planes, stride if i == 0 else 1))
        inp = planes
    self.layers = nn.Sequential(*blocks)
    self.linear = nn.Linear(64, classes)

  def forward(self, x):
    if self.normalize:
      x = (x / 255.0 - self.mean) / self.std
    out = F.relu(self.bn1(self.conv1(x)))
    out = self.layers(out)
    return self.linear(F.adaptive_avg_pool2d(out, 1).flatten(1))


class LambdaLayer(nn.Module):
  """akamaster's: the option-A shortcut is a lambda in the model."""

  def __init__(self, fn):
    super().__init__()
    self.fn = fn

  def forward(self, x):
    return self.fn(x)


class _AkamasterBlock(nn.Module):
  def __init__(self, in_planes, planes, stride=1):
    super().__init__()
    self.conv1 = nn.Conv2d(in_planes, planes, 3, stride, 1, bias=False)
    self.bn1 = nn.BatchNorm2d(planes)
    self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
    self.bn2 = nn.BatchNorm2d(planes)
    self.shortcut = nn.Sequential()
    if stride != 1 or in_planes != planes:
      pad = (planes - in_planes) // 2
      self.shortcut = LambdaLayer(lambda x: F.pad(x[:, :, ::2, ::2],
                                                  (0, 0, 0, 0, pad, pad), "constant", 0))

  def forward(self, x):
    out = F.relu(self.bn1(self.conv1(x)))
    out = self.bn2(self.conv2(out))
    out += self.shortcut(x)
    return F.relu(out)


class AkamasterResNet(nn.Module):
  def __init__(self, num_blocks=(1, 1, 1), widths=(8, 16, 32), classes: int = 10):
    super().__init__()
    self.in_planes = widths[0]
    self.conv1 = nn.Conv2d(3, widths[0], 3, 1, 1, bias=False)
    self.bn1 = nn.BatchNorm2d(widths[0])
    self.layer1 = self._make_layer(widths[0], num_blocks[0], 1)
    self.layer2 = self._make_layer(widths[1], num_blocks[1], 2)
    self.layer3 = self._make_layer(widths[2], num_blocks[2], 2)
    self.linear = nn.Linear(widths[2], classes)

  def _make_layer(self, planes, num_blocks, stride):
    layers = []
    for s in [stride] + [1] * (num_blocks - 1):
      layers.append(_AkamasterBlock(self.in_planes, planes, s))
      self.in_planes = planes
    return nn.Sequential(*layers)

  def forward(self, x):
    out = F.relu(self.bn1(self.conv1(x)))
    out = self.layer3(self.layer2(self.layer1(out)))
    out = F.avg_pool2d(out, out.size()[3])
    out = out.view(out.size(0), -1)
    return self.linear(out)


class _BlockB(nn.Module):
  def __init__(self, inp, planes, stride):
    super().__init__()
    self.body = nn.Sequential(
        nn.Conv2d(inp, planes, 3, stride, 1, bias=False), nn.BatchNorm2d(planes),
        nn.ReLU(inplace=True), nn.Conv2d(planes, planes, 3, 1, 1, bias=False),
        nn.BatchNorm2d(planes))
    self.shortcut = nn.Sequential(nn.Conv2d(inp, planes, 1, stride, bias=False),
                                  nn.BatchNorm2d(planes))

  def forward(self, x):
    return F.relu(self.body(x) + self.shortcut(x))


class ResNetB(nn.Module):
  def __init__(self, classes: int = 10):
    super().__init__()
    self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8),
                              nn.ReLU(inplace=True))
    self.blocks = nn.Sequential(_BlockB(8, 16, 2), _BlockB(16, 24, 2))
    self.heads = nn.ModuleList(nn.Linear(24, classes) for _ in range(3))

  def forward(self, x):
    x = F.adaptive_avg_pool2d(self.blocks(self.stem(x)), (1, 1))
    a, b, c = x.reshape(x.shape[0], -1), x.reshape(-1, 24), torch.flatten(x, 1)
    return self.heads[0](a) + self.heads[1](b) + self.heads[2](c)


def _conv_bn(inp, out, k, stride, groups=1, act=True):
  layers = [nn.Conv2d(inp, out, k, stride, k // 2, groups=groups, bias=False),
            nn.BatchNorm2d(out)]
  if act:
    layers.append(nn.ReLU6(inplace=True))
  return nn.Sequential(*layers)


class _InvertedResidual(nn.Module):
  def __init__(self, inp, out, stride, expand):
    super().__init__()
    hidden = inp * expand
    self.use_res = stride == 1 and inp == out
    layers = [] if expand == 1 else [_conv_bn(inp, hidden, 1, 1)]
    layers += [_conv_bn(hidden, hidden, 3, stride, groups=hidden),
               _conv_bn(hidden, out, 1, 1, act=False)]
    self.conv = nn.Sequential(*layers)

  def forward(self, x):
    return x + self.conv(x) if self.use_res else self.conv(x)


class MobileNetV2(nn.Module):
  # (expansion, channels, repeats, stride), torchvision's table at a CIFAR-sized depth.
  SETTINGS = ((1, 8, 1, 1), (6, 12, 2, 2), (6, 16, 2, 2), (6, 24, 2, 1))

  def __init__(self, classes: int = 10, last: int = 64):
    super().__init__()
    layers, inp = [_conv_bn(3, 16, 3, 1)], 16
    for t, c, n, s in self.SETTINGS:
      for i in range(n):
        layers.append(_InvertedResidual(inp, c, s if i == 0 else 1, t))
        inp = c
    layers.append(_conv_bn(inp, last, 1, 1))
    self.features = nn.Sequential(*layers)
    self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, classes))

  def forward(self, x):
    x = self.features(x)
    return self.classifier(F.adaptive_avg_pool2d(x, 1).flatten(1))


def calibrate_bn(model: nn.Module, nchw: np.ndarray, seed: int = 0) -> nn.Module:
  """BN statistics from `nchw` (as a trained model's), random affine; eval mode."""
  g = torch.Generator().manual_seed(seed)
  for m in model.modules():
    if isinstance(m, nn.BatchNorm2d):
      m.reset_running_stats()
      m.momentum = None  # Cumulative average over the batches.
  model.train()
  with torch.no_grad():
    x = torch.from_numpy(np.ascontiguousarray(nchw, np.float32))
    for i in range(0, len(x), 64):
      model(x[i:i + 64])
  for m in model.modules():
    if isinstance(m, nn.BatchNorm2d):
      n = m.num_features
      m.weight.data = 0.5 + torch.rand(n, generator=g)
      m.bias.data = 0.2 * torch.randn(n, generator=g)
  return model.eval()


def export(model: nn.Module, path: str, *, constant_folding: bool = False,
           size: int = 32, dynamic_batch: bool = False) -> str:
  """The README's export: eval mode, BN kept (TrainingMode.PRESERVE); `dynamic_batch`
  adds what many scripts do, a symbolic batch dimension."""
  axes = {"input": {0: "batch"}, "logits": {0: "batch"}} if dynamic_batch else None
  torch.onnx.export(model.eval(), torch.zeros(1, 3, size, size), path, dynamo=False,
                    do_constant_folding=constant_folding,
                    training=torch.onnx.TrainingMode.PRESERVE,
                    input_names=["input"], output_names=["logits"], dynamic_axes=axes)
  return path
