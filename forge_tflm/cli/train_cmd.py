"""Train a bundled model (resnet20, mobilenet_v2_0.5) with the standard recipe.

Writes OUTPUT (.keras) and OUTPUT with .json (per-epoch log, final test accuracy,
the exact command). Checkpoints every epoch in OUTPUT.ckpt/; running the same
command again resumes there.
"""

from __future__ import annotations


from absl import flags

from forge_tflm.models import MODEL_NAMES


def define_flags(fv: flags.FlagValues) -> flags.FlagValues:
  from forge_tflm.training.train import TrainConfig
  d = TrainConfig()
  flags.DEFINE_enum("model", d.model, list(MODEL_NAMES), "Model to train.", flag_values=fv)
  flags.DEFINE_enum("dataset", "cifar10", ["cifar10", "cifar100", "tiny_imagenet"],
                    "Dataset name.", flag_values=fv)
  flags.DEFINE_string("data_dir", None, "Local dataset path (any supported layout);"
                      " unset: tensorflow-datasets, offline.", flag_values=fv)
  flags.DEFINE_string("output", None, "Output .keras path.", flag_values=fv,
                      required=True)
  flags.DEFINE_integer("epochs", d.epochs, "Training epochs.", flag_values=fv)
  flags.DEFINE_integer("batch_size", d.batch_size, "Batch size.", flag_values=fv)
  flags.DEFINE_float("learning_rate", d.learning_rate, "Peak learning rate.",
                     flag_values=fv)
  flags.DEFINE_integer("warmup_epochs", d.warmup_epochs, "Linear warm-up epochs.",
                       flag_values=fv)
  flags.DEFINE_float("weight_decay", d.weight_decay, "Coupled L2 weight decay.",
                     flag_values=fv)
  flags.DEFINE_float("label_smoothing", d.label_smoothing, "Label smoothing.",
                     flag_values=fv)
  flags.DEFINE_integer("seed", d.seed, "Random seed.", flag_values=fv)
  flags.DEFINE_bool("jit_compile", d.jit_compile, "XLA-compile the training step"
                    " (faster for ResNet on CPU, slower for depthwise convs).",
                    flag_values=fv)
  flags.DEFINE_string("init_from", None, "Start from this trained .keras model (same"
                      " architecture) instead of a fresh initialization: one more"
                      " warm-up + cosine cycle (SGDR-style restart).", flag_values=fv)
  flags.DEFINE_integer("swa_epochs", d.swa_epochs, "End with stochastic weight"
                       " averaging: the last N epochs run at --swa_learning_rate and"
                       " their weights are averaged (BN statistics then recomputed);"
                       " 0 = off.", flag_values=fv)
  flags.DEFINE_float("swa_learning_rate", d.swa_learning_rate, "Constant learning rate"
                     " of the weight-averaging epochs (the cosine decays to it).",
                     flag_values=fv)
  flags.DEFINE_multi_string("teacher", [], "Distill from this trained .keras model"
                            " (same inputs and classes; repeat the flag for an ensemble,"
                            " whose softened predictions are averaged).", flag_values=fv)
  flags.DEFINE_float("distillation_weight", d.distillation_weight, "Weight of the"
                     " teachers' soft targets in the loss (the labels get 1 - weight).",
                     flag_values=fv)
  flags.DEFINE_float("distillation_temperature", d.distillation_temperature,
                     "Softmax temperature of the distillation term.", flag_values=fv)
  flags.DEFINE_integer("limit_train", 0, "Train on a random N of the training images and"
                       " test on a random N of the test images; 0 = all. For smoke"
                       " tests.", lower_bound=0, flag_values=fv)
  return fv


def run(fv: flags.FlagValues, command: str) -> int:
  from forge_tflm.data import load_dataset
  from forge_tflm.training.train import TrainConfig, train

  config = TrainConfig(
      model=fv.model, epochs=fv.epochs, batch_size=fv.batch_size,
      learning_rate=fv.learning_rate, warmup_epochs=fv.warmup_epochs,
      weight_decay=fv.weight_decay, label_smoothing=fv.label_smoothing, seed=fv.seed,
      jit_compile=fv.jit_compile, init_from=fv.init_from, swa_epochs=fv.swa_epochs,
      swa_learning_rate=fv.swa_learning_rate, teachers=tuple(fv.teacher),
      distillation_weight=fv.distillation_weight,
      distillation_temperature=fv.distillation_temperature, limit_train=fv.limit_train)
  from forge_tflm.fileio import check_input_file
  for flag, path in [("--init_from", fv.init_from)] + [("--teacher", t) for t in fv.teacher]:
    if path:
      check_input_file(path, flag)
  if not fv.output.endswith(".keras"):
    raise ValueError(f"--output must end in .keras, got {fv.output!r}")
  train_set = load_dataset(fv.dataset, "train", fv.data_dir)
  test_split = "val" if fv.dataset == "tiny_imagenet" else "test"
  test_set = load_dataset(fv.dataset, test_split, fv.data_dir)
  log = train(config, train_set, test_set, fv.output, command=command)
  print(f"wrote {fv.output}: test accuracy {log['final_test_accuracy']}")
  return 0
