# The TFLite-Micro framework subset every esp32s3_app target compiles (included by
# host/Makefile and cortexm/Makefile; one list, so the targets cannot drift apart):
# tensorflow/lite/micro/*.cc and its allocators, planners and bridge, minus tests,
# test helpers, fakes and recorders (the list esp-tflite-micro's CMakeLists compiles,
# less the recorder), and the shared quantization/tensor utilities the kernels use.
# Needs TFLM_DIR, BUILD_DIR and OPS; defines TFLM_FRAMEWORK_SRCS (the kernels come
# from each target), OPS_DIR and OP_DEFINES.

MICRO := $(TFLM_DIR)/tensorflow/lite/micro
MICRO_EXCLUDE := %_test.cc %/fake_micro_context.cc %/hexdump.cc %/mock_micro_graph.cc \
  %/recording_micro_allocator.cc %/test_helper_custom_ops.cc %/test_helpers.cc \
  %/error_reporter.cc %/recording_single_arena_buffer_allocator.cc
TFLM_FRAMEWORK_SRCS := \
  $(filter-out $(MICRO_EXCLUDE), $(wildcard $(MICRO)/*.cc)) \
  $(filter-out $(MICRO_EXCLUDE), $(wildcard $(MICRO)/arena_allocator/*.cc)) \
  $(filter-out %_test.cc, $(wildcard $(MICRO)/memory_planner/*.cc)) \
  $(filter-out %_test.cc, $(wildcard $(MICRO)/tflite_bridge/*.cc)) \
  $(wildcard $(TFLM_DIR)/tensorflow/lite/core/c/common.cc) \
  $(filter-out %_test.cc, $(wildcard $(TFLM_DIR)/tensorflow/lite/core/api/*.cc)) \
  $(filter-out %_test.cc, $(wildcard $(TFLM_DIR)/tensorflow/compiler/mlir/lite/core/api/*.cc)) \
  $(filter-out %_test.cc, $(wildcard $(TFLM_DIR)/tensorflow/compiler/mlir/lite/schema/*.cc)) \
  $(TFLM_DIR)/tensorflow/lite/kernels/kernel_util.cc \
  $(wildcard $(TFLM_DIR)/tensorflow/lite/kernels/internal/quantization_util.cc) \
  $(wildcard $(TFLM_DIR)/tensorflow/lite/kernels/internal/common.cc) \
  $(wildcard $(TFLM_DIR)/tensorflow/lite/kernels/internal/runtime_shape.cc) \
  $(wildcard $(TFLM_DIR)/tensorflow/lite/kernels/internal/tensor_ctypes.cc) \
  $(wildcard $(TFLM_DIR)/tensorflow/lite/kernels/internal/portable_tensor_utils.cc) \
  $(wildcard $(TFLM_DIR)/tensorflow/lite/kernels/internal/reference/portable_tensor_utils.cc)

# Only the app (its resolver registers OPS: OP_DEFINES) and the archive of OPS'
# kernels depend on the operator set; they go in a folder per set, so one BUILD_DIR
# serves every model and the framework and each kernel compile once per target.
_empty :=
OPS_DIR := $(BUILD_DIR)/ops/$(subst $(_empty) $(_empty),+,$(sort $(OPS)))
DEFAULT_OPS := CONV_2D ADD MEAN FULLY_CONNECTED
ifeq ($(sort $(OPS)),$(sort $(DEFAULT_OPS)))
OP_DEFINES :=
else
OP_DEFINES := -DFORGE_APP_OPS_CUSTOM $(foreach o,$(OPS),-DFORGE_APP_OP_$(o)=1)
endif
