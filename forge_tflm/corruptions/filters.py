"""Image filters the corruptions share, batched over [N,H,W,C] arrays.

Each reproduces the library call the original generators made (OpenCV,
scikit-image, SciPy, ImageMagick's MotionBlurImage) without that library's
per-image Python loop.
"""

from __future__ import annotations

import functools
import math

import cv2
import numpy as np
import scipy.ndimage
import scipy.sparse


def gaussian(x: np.ndarray, sigma: float, mode: str = "nearest",
             truncate: float = 4.0) -> np.ndarray:
  """skimage.filters.gaussian(x, sigma, multichannel=True) on every image.

  skimage's defaults are mode="nearest", truncate=4; the batch and channel
  axes get sigma 0 (not blurred).
  """
  sigmas = (0, sigma, sigma) + (0,) * (x.ndim - 3)
  return scipy.ndimage.gaussian_filter(x, sigmas, mode=mode, truncate=truncate)


@functools.lru_cache(maxsize=None)
def disk_kernel(radius: float, alias_blur: float) -> np.ndarray:
  """The anti-aliased disk of the originals' `disk()` helper, zero border trimmed.

  The original kernel is at least 17x17 with the disk in the middle; cutting
  the all-zero border symmetrically keeps the anchor centred, so filtering
  gives the same values, only faster.
  """
  half = 8 if radius <= 8 else int(math.ceil(radius))
  blur_size = (3, 3) if radius <= 8 else (5, 5)
  grid = np.arange(-half, half + 1)
  xx, yy = np.meshgrid(grid, grid)
  disk = np.asarray(xx ** 2 + yy ** 2 <= radius ** 2, dtype=np.float32)
  disk /= disk.sum()
  kernel = cv2.GaussianBlur(disk, ksize=blur_size, sigmaX=alias_blur)
  nonzero = np.argwhere(kernel != 0)
  keep = int(np.abs(nonzero - half).max()) if len(nonzero) else 0
  return np.ascontiguousarray(kernel[half - keep:half + keep + 1,
                                     half - keep:half + keep + 1])


def filter2d(x: np.ndarray, kernel: np.ndarray) -> np.ndarray:
  """cv2.filter2D (reflect-101 border) of every image and channel.

  OpenCV filters up to 512 channels at once, so images are stacked along
  the channel axis in groups.
  """
  n, h, w, c = x.shape
  stacked = np.ascontiguousarray(x.transpose(1, 2, 0, 3)).reshape(h, w, n * c)
  out = np.empty_like(stacked)
  group = (512 // c) * c
  for start in range(0, n * c, group):
    out[:, :, start:start + group] = cv2.filter2D(
        np.ascontiguousarray(stacked[:, :, start:start + group]), -1, kernel)
  return out.reshape(h, w, n, c).transpose(2, 0, 1, 3)


def motion_kernel(radius: float, sigma: float) -> np.ndarray:
  """Weights of ImageMagick's MotionBlurImage: a one-sided, normalized Gaussian.

  ImageMagick uses 2*ceil(radius)+1 taps (GetOptimalKernelWidth1D) with
  weight exp(-i^2 / (2 sigma^2)) for tap i = 0..width-1.
  """
  width = int(2 * math.ceil(radius) + 1)
  taps = np.arange(width, dtype=np.float64)
  weights = np.exp(-taps ** 2 / (2.0 * sigma ** 2))
  return weights / weights.sum()


def motion_offsets(width: int, angle_degrees: float) -> tuple[np.ndarray, np.ndarray]:
  """Pixel offsets (dx, dy) of ImageMagick's motion-blur taps at an angle.

  Same arithmetic as MotionBlurImage: tap i samples the source at
  (x + ceil(i*cos/h - 0.5), y + ceil(i*sin/h - 0.5)), with the direction
  vector scaled by the width and normalized by its hypotenuse.
  """
  angle = math.radians(angle_degrees)
  point_x = width * math.sin(angle)
  point_y = width * math.cos(angle)
  hyp = math.hypot(point_x, point_y)
  taps = np.arange(width, dtype=np.float64)
  dx = np.ceil(taps * point_y / hyp - 0.5).astype(np.int64)
  dy = np.ceil(taps * point_x / hyp - 0.5).astype(np.int64)
  return dx, dy


def motion_blur(x: np.ndarray, radius: float, sigma: float,
                angles_degrees) -> np.ndarray:
  """ImageMagick's motion blur of every image, each at its own angle.

  Out-of-image taps read the nearest edge pixel (ImageMagick's default
  "edge" virtual-pixel method). Returns float values on the input's scale,
  unrounded.

  Args:
    x: float array [N,H,W,C].
    radius, sigma: MotionBlurImage's radius and sigma.
    angles_degrees: N angles.
  """
  n, h, w, c = x.shape
  weights = motion_kernel(radius, sigma)
  width = len(weights)
  offsets = [motion_offsets(width, a) for a in angles_degrees]
  dx = np.stack([o[0] for o in offsets])  # [N, width]
  dy = np.stack([o[1] for o in offsets])
  pad = width
  # Channels-first, so each gathered window is a run of contiguous rows.
  padded = np.pad(x.transpose(0, 3, 1, 2), ((0, 0), (0, 0), (pad, pad), (pad, pad)),
                  mode="edge")
  # windows[n, c, i, j] is the HxW image shifted by (i - pad, j - pad).
  windows = np.lib.stride_tricks.sliding_window_view(padded, (h, w), axis=(2, 3))
  batch = np.arange(n)
  out = np.zeros((n, c, h, w), dtype=np.float64)
  for tap, weight in enumerate(weights):
    out += weight * windows[batch, :, pad + dy[:, tap], pad + dx[:, tap]]
  return out.transpose(0, 2, 3, 1)


def _zoom_matrix(size: int, factor: float) -> scipy.sparse.csr_matrix:
  """1-D operator [size, size] of the originals' clipped_zoom along one axis.

  clipped_zoom crops the central ceil(size/factor) pixels, enlarges them by
  scipy.ndimage.zoom(order=1), and keeps the central `size` of the result.
  Zooming an identity matrix with the same call yields exactly the
  interpolation weights scipy uses.
  """
  crop = int(np.ceil(size / factor))
  top = (size - crop) // 2
  weights = scipy.ndimage.zoom(np.eye(crop), (factor, 1), order=1)
  trim = (weights.shape[0] - size) // 2
  weights = weights[trim:trim + size]
  full = np.zeros((size, size))
  full[:, top:top + crop] = weights
  return scipy.sparse.csr_matrix(full)


@functools.lru_cache(maxsize=64)
def zoom_operator(height: int, width: int, factors: tuple[float, ...],
                  include_identity: bool) -> scipy.sparse.csr_matrix:
  """Mean of clipped_zoom over `factors` (and the image itself if asked).

  A sparse [H*W, H*W] matrix acting on row-major flattened images; bilinear
  zoom is separable, so each factor contributes kron(rows, cols).
  """
  total = scipy.sparse.identity(height * width, format="csr") if include_identity \
      else scipy.sparse.csr_matrix((height * width, height * width))
  for factor in factors:
    total = total + scipy.sparse.kron(_zoom_matrix(height, factor),
                                      _zoom_matrix(width, factor), format="csr")
  count = len(factors) + int(include_identity)
  return (total / count).astype(np.float32).tocsr()


def apply_pixel_operator(x: np.ndarray, operator: scipy.sparse.spmatrix) -> np.ndarray:
  """Applies an [H*W, H*W] linear pixel map to every image and channel."""
  n, h, w, c = x.shape
  columns = np.ascontiguousarray(x.transpose(1, 2, 0, 3), dtype=np.float32)
  out = operator @ columns.reshape(h * w, n * c)
  return np.asarray(out).reshape(h, w, n, c).transpose(2, 0, 1, 3)
