"""The executor flags every sweeping subcommand shares (forge_tflm.sweep)."""

from __future__ import annotations

from absl import flags

from forge_tflm.sweep import EXECUTORS, Executor, make_executor


def define_sweep_flags(fv: flags.FlagValues, unit: str = "unit",
                       default: str = "processes") -> None:
  flags.DEFINE_enum("executor", default, list(EXECUTORS),
                    f"Where the {unit}s run: inline (this process), processes (local"
                    " workers) or ray (a local Ray instance, or --ray_address). Results"
                    " are identical whichever runs them.", flag_values=fv)
  flags.DEFINE_integer("workers", 0, "Worker processes / Ray CPUs (0: all cores).",
                       lower_bound=0, flag_values=fv)
  flags.DEFINE_string("ray_address", None, "Join this Ray cluster (e.g. ray://head:10001"
                      " or auto) instead of starting a local instance.", flag_values=fv)


def executor_from_flags(fv: flags.FlagValues) -> Executor:
  if fv.ray_address and fv.executor != "ray":
    raise ValueError("--ray_address needs --executor=ray")
  return make_executor(fv.executor, fv.workers or None, fv.ray_address)
