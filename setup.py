"""Build script: the C core of FORGE_RECALIB is compiled into the package here.

Metadata lives in pyproject.toml; this file only declares the native extension.
"""

from setuptools import Extension, setup

_OP_DIR = "custom_ops/forge_recalib"
_CORE_DIR = f"{_OP_DIR}/src"
_CONTROLLER_DIR = "custom_ops/forge_controller"
with open(f"{_CONTROLLER_DIR}/sources.txt") as _f:
  _CONTROLLER_SOURCES = _f.read().split()
# The op's C core: the .c files of its one source list (the .cc files are the TFLM
# side, which the evaluator does not use; the MCU variants compile to nothing here).
with open(f"{_OP_DIR}/sources.txt") as _f:
  _CORE_SOURCES = [f"{_OP_DIR}/{name}" for name in _f.read().split() if name.endswith(".c")]

EXT_MODULES = [
    Extension(
        "forge_tflm.ops._forge_recalib_core",
        sources=_CORE_SOURCES + ["forge_tflm/ops/_core_module.c"],
        include_dirs=[_CORE_DIR],
        depends=[f"{_CORE_DIR}/forge_recalib.h", f"{_CORE_DIR}/forge_recalib_internal.h"],
        # -ffp-contract=off: no FMA, so the core stays bit-exact to the numpy
        # reference (SPEC.md). -std=c99 is the core's language level. -O3 lets
        # GCC vectorize the stats and affine passes (still bit-exact without
        # -ffast-math): ~2x faster than -O2 in benchmarks/bench_recalib_core.py.
        extra_compile_args=["-O3", "-ffp-contract=off", "-std=c99",
                            "-fno-fast-math", "-Wall", "-Wextra"],
        # Vectorized, the affine per-element pass beats the 256-entry table
        # on x86 (measured), so the host never picks the table automatically.
        # FORGE_RECALIB_X86: also build the x86 variant's hooks (AVX2 / AVX-512F
        # loops chosen at run time on x86-64, the ansi loops elsewhere); the
        # binding uses them.
        define_macros=[("FORGE_RECALIB_LUT_MIN_M", "2147483647"),
                       ("FORGE_RECALIB_X86", "1")],
    ),
    # The field controller: the same C every firmware target compiles
    # (custom_ops/forge_controller/sources.txt).
    Extension(
        "forge_tflm.evaluation._forge_controller",
        sources=[f"{_CONTROLLER_DIR}/src/{name}" for name in _CONTROLLER_SOURCES]
        + ["forge_tflm/evaluation/_controller_module.c"],
        include_dirs=[f"{_CONTROLLER_DIR}/src", _CORE_DIR],
        depends=[f"{_CONTROLLER_DIR}/src/forge_controller.h",
                 f"{_CONTROLLER_DIR}/src/forge_controller_settings.h",
                 f"{_CORE_DIR}/forge_recalib.h"],
        extra_compile_args=["-O2", "-ffp-contract=off", "-std=c99", "-fno-fast-math",
                            "-Wall", "-Wextra"],
        # The evaluator also gates CIFAR-100 and Tiny-ImageNet models; a device build
        # keeps the header's 64 (3 doubles of state per class).
        define_macros=[("FORGE_CONTROLLER_MAX_CLASSES", "1024")],
    ),
]

setup(ext_modules=EXT_MODULES)
