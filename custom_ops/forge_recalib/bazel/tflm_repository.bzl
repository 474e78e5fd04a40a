"""tflm_repository: a TFLite-Micro source tree as the Bazel repository @tflite_micro.

TFLM's own Bazel build needs Bzlmod and Bazel 7+; this rule instead exposes
any TFLM checkout to a WORKSPACE build (Bazel 4.2+) through our overlay
BUILD file (tflite_micro.BUILD: TFLM headers, and the framework subset the
kernel test links, the same subset as micro/Makefile). Which tree, as for the
Makefile:

  TFLM_DIR              a tflite-micro checkout (required)
  TFLM_THIRD_PARTY_DIR  flatbuffers/include (TFLM's pinned version, with its
                        flatbuffers.patch), gemmlowp/, ruy/; default
                        $TFLM_DIR/tensorflow/lite/micro/tools/make/downloads

e.g. `bazel test --repo_env=TFLM_DIR=... --repo_env=TFLM_THIRD_PARTY_DIR=...`.
Files are symlinked one by one (TFLM's own BUILD files would otherwise make
subpackages that hide them from the overlay).
"""

def _find(rctx, root, names):
    args = ["find", ".", "-type", "f", "("]
    for i, n in enumerate(names):
        args += (["-o"] if i else []) + ["-name", n]
    args.append(")")
    res = rctx.execute(args, working_directory = root)
    if res.return_code != 0:
        fail("cannot list %s: %s" % (root, res.stderr))
    return [f[2:] for f in res.stdout.splitlines() if f.startswith("./")]

def _tflm_repository_impl(rctx):
    tflm = rctx.os.environ.get("TFLM_DIR", "")
    if not tflm:
        fail("@tflite_micro needs a tflite-micro source tree: pass " +
             "--repo_env=TFLM_DIR=/path/to/tflite-micro (and " +
             "--repo_env=TFLM_THIRD_PARTY_DIR=... unless TFLM's make downloads " +
             "are in place); see custom_ops/forge_recalib/README.md")
    third_party = rctx.os.environ.get(
        "TFLM_THIRD_PARTY_DIR",
        tflm + "/tensorflow/lite/micro/tools/make/downloads",
    )
    if not rctx.path(tflm + "/tensorflow/lite/micro/micro_interpreter.h").exists:
        fail("TFLM_DIR=%s is not a tflite-micro source tree" % tflm)
    for top in ["tensorflow", "signal"]:  # signal/: op resolver headers
        for f in _find(rctx, tflm + "/" + top, ["*.h", "*.cc", "*.c"]):
            rctx.symlink(tflm + "/" + top + "/" + f, top + "/" + f)
    for sub in ["flatbuffers/include", "gemmlowp", "ruy"]:
        src = third_party + "/" + sub
        if not rctx.path(src).exists:
            fail("TFLM_THIRD_PARTY_DIR=%s has no %s" % (third_party, sub))
        for f in _find(rctx, src, ["*.h"]):
            rctx.symlink(src + "/" + f, "third_party/" + sub + "/" + f)
    rctx.symlink(rctx.attr.build_file, "BUILD.bazel")
    rctx.file("WORKSPACE", 'workspace(name = "%s")\n' % rctx.name)

tflm_repository = repository_rule(
    implementation = _tflm_repository_impl,
    attrs = {"build_file": attr.label(allow_single_file = True)},
    environ = ["TFLM_DIR", "TFLM_THIRD_PARTY_DIR"],
    local = True,
)
