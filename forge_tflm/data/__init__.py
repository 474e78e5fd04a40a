"""Datasets: tensorflow-datasets and the local layouts people actually have."""

from forge_tflm.data.cifar_c import list_corruptions, load_cifar_c
from forge_tflm.data.datasets import (KNOWN_DATASETS, load_dataset, load_local,
                                      load_tfds, load_tfds_corrupted)
from forge_tflm.data.imageset import DatasetFormatError, DatasetNotFoundError, ImageSet

__all__ = [
    "DatasetFormatError", "DatasetNotFoundError", "ImageSet", "KNOWN_DATASETS", "list_corruptions",
    "load_cifar_c", "load_dataset", "load_local", "load_tfds", "load_tfds_corrupted",
]
