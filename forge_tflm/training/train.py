"""The standard CIFAR training recipe behind `forge_tflm train`.

SGD with Nesterov momentum 0.9, linear warm-up then cosine decay to zero, coupled
L2 weight decay, random crop (4-pixel zero padding) and horizontal flip, inputs
scaled to [0, 1]. Optionally the run ends in stochastic weight averaging (see
`swa.py`): the cosine then decays to `swa_learning_rate` instead of zero and stays
there for the last `swa_epochs` epochs, whose end-of-epoch weights are averaged.
With `teachers`, the loss also distills their (ensembled) predictions on the same
augmented batches (see `distill.py`).
Checkpoints after every epoch so a stopped run resumes where it left off; the
finished model is written atomically as `.keras` next to a JSON log.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import time

from absl import logging
import numpy as np

from forge_tflm.data.imageset import ImageSet
from forge_tflm.fileio import atomic_path, file_sha256, write_atomically
from forge_tflm.training.swa import WeightAverage, recompute_batchnorm_statistics


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  model: str = "resnet20"
  epochs: int = 35
  batch_size: int = 128
  learning_rate: float = 0.1
  warmup_epochs: int = 2
  weight_decay: float = 5e-4
  label_smoothing: float = 0.0
  seed: int = 0
  jit_compile: bool = True
  # Start from this trained .keras model's weights (a further cosine cycle,
  # as in SGDR) instead of a fresh initialization.
  init_from: str | None = None
  # Stochastic weight averaging over the last `swa_epochs` epochs (0: off), run
  # at the constant `swa_learning_rate` (0.01: the SWA authors' CIFAR-10 setting,
  # github.com/timgaripov/swa).
  swa_epochs: int = 0
  swa_learning_rate: float = 0.01
  # Knowledge distillation from these trained .keras models (an ensemble if
  # several); () = off. Hinton et al.'s CIFAR setting: weight 0.9, temperature 4.
  teachers: tuple[str, ...] = ()
  distillation_weight: float = 0.9
  distillation_temperature: float = 4.0
  # Smoke tests: train on a random N of the training images and test on a random N
  # of the test images (both drawn with `seed`); 0 = all. Part of the recipe, so a
  # checkpoint made with another N is not resumed.
  limit_train: int = 0

  def __post_init__(self):
    object.__setattr__(self, "teachers", tuple(self.teachers))
    if self.limit_train < 0:
      raise ValueError(f"limit_train must be >= 0, got {self.limit_train}")
    if self.epochs < 1 or self.batch_size < 1:
      raise ValueError("epochs and batch_size must be positive")
    if not 0 <= self.swa_epochs <= self.epochs:
      raise ValueError(f"swa_epochs must be in [0, epochs], got {self.swa_epochs}"
                       f" with {self.epochs} epochs")
    if self.swa_epochs and self.swa_learning_rate <= 0:
      raise ValueError("swa_learning_rate must be positive")
    if not 0 <= self.warmup_epochs < self.epochs:
      raise ValueError(f"warmup_epochs must be in [0, epochs), got {self.warmup_epochs}"
                       f" with {self.epochs} epochs")
    if self.swa_epochs and self.warmup_epochs and not (
        self.warmup_epochs < self.swa_start_epoch):
      raise ValueError(f"warmup_epochs must be below the {self.swa_start_epoch} epochs"
                       f" before weight averaging, got {self.warmup_epochs}")
    if self.teachers and not (0 < self.distillation_weight <= 1
                              and self.distillation_temperature > 0):
      raise ValueError("distillation_weight must be in (0, 1] and"
                       " distillation_temperature positive")

  @property
  def swa_start_epoch(self) -> int:
    """Index of the first epoch whose weights are averaged (== epochs if off)."""
    return self.epochs - self.swa_epochs


# Settings that change how fast a run goes, not what it computes: a stopped run
# may resume with different values (XLA's speed on CPU varies by model and
# machine: for ResNet-20 1.4x faster than plain kernels on one host, up to 2.3x
# slower on another).
_EXECUTION_ONLY = ("jit_compile",)


def recipe(config: dict) -> dict:
  """What a config (a dict, as a checkpoint's state.json stores it) computes: a stopped
  run resumes only from a checkpoint whose recipe is equal. Execution-only settings
  (_EXECUTION_ONLY) are left out."""
  # Fields added since a checkpoint was written take their defaults, which keep
  # the recipe it was made with.
  config = {**dataclasses.asdict(TrainConfig()), **config}
  config = json.loads(json.dumps(config))  # Tuples and JSON's lists compare equal.
  return {k: v for k, v in config.items() if k not in _EXECUTION_ONLY}


def learning_rate_schedule(config: TrainConfig, steps_per_epoch: int):
  """Warm-up, then cosine decay to 0 (or to `swa_learning_rate`, then constant)."""
  import keras

  warmup_steps = steps_per_epoch * config.warmup_epochs
  decay_steps = steps_per_epoch * config.swa_start_epoch - warmup_steps
  if decay_steps <= 0:  # Weight averaging from the first step: constant rate.
    return keras.optimizers.schedules.CosineDecay(
        config.swa_learning_rate, decay_steps=1, alpha=1.0)
  # CosineDecay holds its floor, alpha * peak, after decay_steps.
  alpha = config.swa_learning_rate / config.learning_rate if config.swa_epochs else 0.0
  return keras.optimizers.schedules.CosineDecay(
      initial_learning_rate=0.0 if warmup_steps else config.learning_rate,
      decay_steps=decay_steps, alpha=alpha,
      warmup_target=config.learning_rate if warmup_steps else None,
      warmup_steps=warmup_steps)


def _augment_fn(tf, pad: int):
  def augment(image, label):
    shape = tf.shape(image)
    image = tf.image.pad_to_bounding_box(image, pad, pad, shape[0] + 2 * pad,
                                         shape[1] + 2 * pad)
    image = tf.image.random_crop(image, shape)
    image = tf.image.random_flip_left_right(image)
    return image, label
  return augment


def _to_float(tf):
  def convert(image, label):
    return tf.cast(image, tf.float32) / 255.0, label
  return convert


def atomic_save_model(model, path: str) -> None:
  """Saves a Keras model so that `path` is never left half-written.

  A run stopped during a plain save would leave a corrupt checkpoint that
  cannot be resumed; this writes a temporary file and renames it into place.
  """
  with atomic_path(path, ".keras") as tmp:  # Keras insists on the extension.
    model.save(tmp)


def load_initial_weights(model, path: str) -> None:
  """Copies a trained model's weights into the freshly built `model`.

  The recipe's model (its regularizers, names) is kept; only the values come
  from `path`, which must have the same architecture.
  """
  import keras

  source = keras.saving.load_model(path, compile=False)
  ours, theirs = model.get_weights(), source.get_weights()
  if [w.shape for w in ours] != [w.shape for w in theirs]:
    raise ValueError(f"--init_from {path}: architecture differs from {model.name}")
  model.set_weights(theirs)
  logging.info("initialized %s from %s", model.name, path)


def train(config: TrainConfig, train_set: ImageSet, test_set: ImageSet | None,
          output: str, command: str = "", checkpoint_dir: str | None = None) -> dict:
  """Trains `config.model` on `train_set`; writes `output` (.keras) and `output`.json.

  Returns the JSON log as a dict.
  """
  import keras

  if not output.endswith(".keras"):
    raise ValueError(f"output must end in .keras, got {output!r}")
  if config.limit_train:
    train_set = train_set.random_subset(config.limit_train, config.seed)
    if test_set is not None:  # Random, not the first N of a label-sorted split.
      test_set = test_set.random_subset(config.limit_train, config.seed)
  # The steps below draw from the global seed in this order (build the model,
  # then the datasets' random ops): a reordering changes what a seed trains.
  keras.utils.set_random_seed(config.seed)
  # Created by the first checkpoint write: a run that fails before its first epoch
  # (a bad --init_from) leaves no empty folder behind.
  files = _CheckpointFiles.under(checkpoint_dir or output + ".ckpt")
  steps_per_epoch = int(np.ceil(len(train_set) / config.batch_size))
  schedule = learning_rate_schedule(config, steps_per_epoch)
  model, history, average = _resume_or_build(config, train_set, files, schedule)
  logging.info("%s: %d parameters, %d steps/epoch", model.name, model.count_params(),
               steps_per_epoch)
  fit_ds, train_ds, test_ds = _datasets(config, train_set, test_set)
  _run_epochs(model, config, schedule, fit_ds, test_ds, files, history, average)
  swa = None
  if config.swa_epochs:
    swa = _finish_weight_average(model, average, train_ds, test_ds, config)
  log = _run_log(config, command, train_set, test_set, model, history, swa)
  atomic_save_model(model, output)
  write_atomically({os.path.splitext(output)[0] + ".json": json.dumps(log, indent=2).encode()})
  # Complete: the same command again finds nothing to do; another recipe on this
  # output starts a new run instead of being refused as a resume.
  write_atomically({files.state: json.dumps(
      {"config": dataclasses.asdict(config), "history": history, "finished": True}).encode()})
  return log


@dataclasses.dataclass(frozen=True)
class _CheckpointFiles:
  """Where a run's checkpoint lives: its state, last weights and running average."""
  directory: str
  state: str
  weights: str
  average: str

  @classmethod
  def under(cls, directory: str) -> "_CheckpointFiles":
    return cls(directory, os.path.join(directory, "state.json"),
               os.path.join(directory, "last.keras"),
               os.path.join(directory, "swa_average.npz"))


def _resumable_state(config: TrainConfig, files: _CheckpointFiles) -> dict | None:
  """The checkpoint's state if it holds a run of this recipe, else None.

  Refuses an unfinished run of another recipe (resuming it would mix two recipes);
  a finished one is left for a new run to overwrite.
  """
  if not (os.path.exists(files.state) and os.path.exists(files.weights)):
    return None
  with open(files.state) as f:
    state = json.load(f)
  if recipe(state.get("config", {})) == recipe(dataclasses.asdict(config)):
    return state
  if not state.get("finished"):
    raise ValueError(f"checkpoint in {files.directory} was made with another config;"
                     " remove it to start over")
  logging.info("%s holds a finished run of another recipe: starting a new run",
               files.directory)
  return None


def _resume_or_build(config: TrainConfig, train_set: ImageSet, files: _CheckpointFiles,
                     schedule):
  """The compiled model, the epochs' history so far and the running weight average."""
  import keras

  # Imported for its side effect: registers the loss a checkpoint may use.
  from forge_tflm.training import distill  # noqa: F401

  state = _resumable_state(config, files)
  average = WeightAverage()
  if state is None:
    return _build_model(config, train_set, schedule), [], average
  model = keras.saving.load_model(files.weights, compile=True)
  model.jit_compile = config.jit_compile  # The checkpoint's own value is restored above.
  history = state["history"]
  if len(history) > config.swa_start_epoch:
    with open(files.average, "rb") as f:
      average = WeightAverage.from_bytes(f.read())
  logging.info("resuming %s from epoch %d", config.model, len(history))
  return model, history, average


def _build_model(config: TrainConfig, train_set: ImageSet, schedule):
  """A fresh model (or --init_from's weights), compiled with the recipe's loss."""
  import keras

  from forge_tflm.models import build_model
  from forge_tflm.training import distill

  model = build_model(config.model, train_set.num_classes,
                      train_set.images.shape[1:], config.weight_decay)
  if config.init_from:
    load_initial_weights(model, config.init_from)
  if config.teachers:
    loss = distill.DistillationLoss(config.distillation_weight,
                                    config.distillation_temperature,
                                    config.label_smoothing)
    metric = distill.accuracy_metric()
  else:
    loss = keras.losses.CategoricalCrossentropy(
        from_logits=True, label_smoothing=config.label_smoothing)
    metric = "accuracy"
  model.compile(
      optimizer=keras.optimizers.SGD(schedule, momentum=0.9, nesterov=True),
      loss=loss, metrics=[metric], jit_compile=config.jit_compile)
  return model


def _datasets(config: TrainConfig, train_set: ImageSet, test_set: ImageSet | None):
  """(fit, train, test) datasets: fit is train plus the teachers' targets, if any;
  train (augmented, without them) is what weight averaging recomputes BN on."""
  import tensorflow as tf

  from forge_tflm.training import distill

  num_classes = train_set.num_classes
  one_hot = lambda x, y: (x, tf.one_hot(y, num_classes))
  pad = max(1, train_set.images.shape[1] // 8)
  train_ds = (tf.data.Dataset.from_tensor_slices((train_set.images, train_set.labels))
              .shuffle(len(train_set), seed=config.seed, reshuffle_each_iteration=True)
              .map(_augment_fn(tf, pad), num_parallel_calls=tf.data.AUTOTUNE)
              .map(_to_float(tf)).map(one_hot)
              .batch(config.batch_size))
  fit_ds = train_ds
  if config.teachers:
    teachers = distill.load_teachers(config.teachers, num_classes,
                                     train_set.images.shape[1:])
    fit_ds = train_ds.map(distill.append_teacher_probabilities(
        teachers, config.distillation_temperature))
  fit_ds, train_ds = fit_ds.prefetch(tf.data.AUTOTUNE), train_ds.prefetch(tf.data.AUTOTUNE)
  test_ds = None
  if test_set is not None:
    test_ds = (tf.data.Dataset.from_tensor_slices((test_set.images, test_set.labels))
               .map(_to_float(tf)).map(one_hot).batch(256).prefetch(tf.data.AUTOTUNE))
  return fit_ds, train_ds, test_ds


def _run_epochs(model, config: TrainConfig, schedule, fit_ds, test_ds,
                files: _CheckpointFiles, history: list[dict],
                average: WeightAverage) -> None:
  """Trains the epochs after `history`'s, appending to it and checkpointing each."""
  import keras

  for epoch in range(len(history), config.epochs):
    # Reseeding per epoch makes a resumed run draw the same augmentations.
    keras.utils.set_random_seed(config.seed * 1000 + epoch)
    t0 = time.time()
    result = model.fit(fit_ds, epochs=1, shuffle=False,  # tf.data shuffles.
                       verbose=2 if logging.level_info() else 0)
    entry = {"epoch": epoch + 1,
             "loss": float(result.history["loss"][-1]),
             "train_accuracy": float(result.history["accuracy"][-1]),
             "learning_rate": float(schedule(model.optimizer.iterations)),
             "seconds": round(time.time() - t0, 1)}
    if test_ds is not None:
      _, acc = model.evaluate(test_ds, verbose=0)
      entry["test_accuracy"] = float(acc)
    history.append(entry)
    logging.info("epoch %d/%d: %s", epoch + 1, config.epochs, json.dumps(entry))
    checkpoint = {files.state: json.dumps(
        {"config": dataclasses.asdict(config), "history": history}).encode()}
    if epoch >= config.swa_start_epoch:
      average.add([w.numpy() for w in model.trainable_weights])
      checkpoint[files.average] = average.to_bytes()
    atomic_save_model(model, files.weights)
    write_atomically(checkpoint)


def _run_log(config: TrainConfig, command: str, train_set: ImageSet,
             test_set: ImageSet | None, model, history: list[dict],
             swa: dict | None) -> dict:
  """The JSON log written next to the finished model."""
  import keras
  import tensorflow as tf

  return {
      "model": config.model,
      "config": dataclasses.asdict(config),
      "command": command,
      "train_data": train_set.source,
      "train_images": len(train_set),
      "test_data": test_set.source if test_set is not None else None,
      "test_images": len(test_set) if test_set is not None else 0,
      "test_class_counts": (np.bincount(test_set.labels, minlength=test_set.num_classes)
                            .tolist() if test_set is not None else []),
      "parameters": int(model.count_params()),
      "init_from_sha256": file_sha256(config.init_from) if config.init_from else None,
      "teachers_sha256": [file_sha256(p) for p in config.teachers],
      "history": history,
      "swa": swa,
      "final_test_accuracy": (swa.get("test_accuracy") if swa else
                              history[-1].get("test_accuracy") if history else None),
      "versions": {"tensorflow": tf.__version__, "keras": keras.__version__,
                   "python": platform.python_version()},
  }


def _finish_weight_average(model, average: WeightAverage, train_ds, test_ds,
                           config: TrainConfig) -> dict:
  """Loads the averaged weights into `model` and recomputes its BN statistics."""
  import keras

  if average.count != config.swa_epochs:
    raise RuntimeError(f"averaged {average.count} epochs, expected {config.swa_epochs}")
  for variable, value in zip(model.trainable_weights, average.weights):
    variable.assign(value.astype(variable.dtype))
  keras.utils.set_random_seed(config.seed * 1000 + config.epochs)
  t0 = time.time()
  batches = recompute_batchnorm_statistics(model, (x for x, _ in train_ds))
  result = {"epochs_averaged": average.count, "learning_rate": config.swa_learning_rate,
            "batchnorm_batches": batches, "seconds": round(time.time() - t0, 1)}
  if test_ds is not None:
    result["test_accuracy"] = float(model.evaluate(test_ds, verbose=0)[1])
  logging.info("weight average of %d epochs: %s", average.count, json.dumps(result))
  return result
