/* The scratch each optimized kernel family asks TFLM's arena for, per op, from the
 * kernels' own size functions (forge_tflm/deploy/arena.py compiles this file for the
 * host with the unmodified ESP-NN and CMSIS-NN sources that define them, and calls it
 * through ctypes).
 *
 * Each function fills the kernel library's structs the way its TFLM adapter's Prepare
 * does (esp-tflite-micro kernels/esp_nn/{conv,depthwise_conv,softmax}.cc, TFLite-Micro
 * kernels/cmsis_nn/{conv,depthwise_conv,fully_connected,pooling}.cc) and returns what
 * the adapter passes to RequestScratchBufferInArena (0: no request). Shapes are NHWC;
 * pad is TFLM's computed padding (OpDataConv.padding), not the TFLite enum.
 */

#include <stdint.h>

#include "esp_nn_defs.h"
#include "esp_nn_ansi_headers.h"
#include "esp_nn_esp32s3.h"

#include "arm_nnfunctions.h"

/* Kernel families; arena.py's KERNELS lists them in this order. */
enum { FORGE_REFERENCE = 0, FORGE_ESP_NN_S3, FORGE_CMSIS_NN, FORGE_CMSIS_NN_DSP,
       FORGE_CMSIS_NN_MVE };

static cmsis_nn_dims cmsis_dims(const int32_t *nhwc) {
  cmsis_nn_dims d = {nhwc[0], nhwc[1], nhwc[2], nhwc[3]};
  return d;
}

static data_dims_t esp_dims(const int32_t *nhwc, int32_t extra) {
  data_dims_t d = {.width = nhwc[2], .height = nhwc[1], .channels = nhwc[3], .extra = extra};
  return d;
}

/* CONV_2D: in, filter [out, kh, kw, in], out; geo = {stride_h, stride_w, pad_h, pad_w,
 * dilation_h, dilation_w}. */
int32_t forge_conv_scratch(int kernels, const int32_t *in, const int32_t *filter,
                           const int32_t *out, const int32_t *geo) {
  if (kernels == FORGE_ESP_NN_S3) {
    data_dims_t i = esp_dims(in, 1), o = esp_dims(out, 1), f = esp_dims(filter, 0);
    conv_params_t p = {.in_offset = 0, .out_offset = 0, .stride = {geo[1], geo[0]},
                       .padding = {geo[3], geo[2]}, .dilation = {0, 0},
                       .activation = {-128, 127}};
    return esp_nn_get_conv_scratch_size_esp32s3(&i, &f, &o, &p);
  }
  /* cmsis_nn/conv.cc: filter n = 1; offsets and activation do not size the buffer. */
  cmsis_nn_dims i = cmsis_dims(in), o = cmsis_dims(out);
  cmsis_nn_dims f = {1, filter[1], filter[2], filter[3]};
  cmsis_nn_conv_params p = {0, 0, {geo[1], geo[0]}, {geo[3], geo[2]}, {geo[5], geo[4]},
                            {-128, 127}};
  switch (kernels) {
    case FORGE_CMSIS_NN: return arm_convolve_wrapper_s8_get_buffer_size(&p, &i, &f, &o);
    case FORGE_CMSIS_NN_DSP: return arm_convolve_wrapper_s8_get_buffer_size_dsp(&p, &i, &f, &o);
    case FORGE_CMSIS_NN_MVE: return arm_convolve_wrapper_s8_get_buffer_size_mve(&p, &i, &f, &o);
  }
  return 0;
}

/* DEPTHWISE_CONV_2D: filter [1, kh, kw, out]; geo as above plus geo[6] = depth_multiplier. */
int32_t forge_depthwise_scratch(int kernels, const int32_t *in, const int32_t *filter,
                                const int32_t *out, const int32_t *geo) {
  if (kernels == FORGE_ESP_NN_S3) {
    data_dims_t i = esp_dims(in, 1), o = esp_dims(out, 1), f = esp_dims(filter, 0);
    dw_conv_params_t p = {.in_offset = 0, .out_offset = 0, .ch_mult = geo[6],
                          .stride = {geo[1], geo[0]}, .padding = {geo[3], geo[2]},
                          .dilation = {0, 0}, .activation = {-128, 127}};
    return esp_nn_get_depthwise_conv_scratch_size_esp32s3(&i, &f, &o, &p);
  }
  /* cmsis_nn/depthwise_conv.cc sets only padding and dilation (and the dims). */
  cmsis_nn_dims i = cmsis_dims(in), o = cmsis_dims(out);
  cmsis_nn_dims f = {1, filter[1], filter[2], out[3]};
  cmsis_nn_dw_conv_params p = {0};
  p.padding.h = geo[2], p.padding.w = geo[3], p.dilation.h = geo[4], p.dilation.w = geo[5];
  p.ch_mult = geo[6], p.stride.h = geo[0], p.stride.w = geo[1];
  switch (kernels) {
    case FORGE_CMSIS_NN: return arm_depthwise_conv_wrapper_s8_get_buffer_size(&p, &i, &f, &o);
    case FORGE_CMSIS_NN_DSP:
      return arm_depthwise_conv_wrapper_s8_get_buffer_size_dsp(&p, &i, &f, &o);
    case FORGE_CMSIS_NN_MVE:
      return arm_depthwise_conv_wrapper_s8_get_buffer_size_mve(&p, &i, &f, &o);
  }
  return 0;
}

/* FULLY_CONNECTED with a 2-D output (cmsis_nn/fully_connected.cc's non-1x1 path; TFLM's
 * build leaves KERNELS_OPTIMIZED_FOR_SPEED off, so the buffer is scratch): filter_dims.c
 * is the output depth. ESP-NN's adapter requests nothing for int8 filters. */
int32_t forge_fully_connected_scratch(int kernels, int32_t accum_depth, int32_t out_depth) {
  cmsis_nn_dims f = {accum_depth, 1, 1, out_depth};
  switch (kernels) {
    case FORGE_CMSIS_NN: return arm_fully_connected_s8_get_buffer_size(&f);
    case FORGE_CMSIS_NN_DSP: return arm_fully_connected_s8_get_buffer_size_dsp(&f);
    case FORGE_CMSIS_NN_MVE: return arm_fully_connected_s8_get_buffer_size_mve(&f);
  }
  return 0;
}

/* AVERAGE_POOL_2D (cmsis_nn/pooling.cc); ESP-NN's pooling requests nothing. */
int32_t forge_avgpool_scratch(int kernels, int32_t out_w, int32_t depth) {
  switch (kernels) {
    case FORGE_CMSIS_NN: return arm_avgpool_s8_get_buffer_size(out_w, depth);
    case FORGE_CMSIS_NN_DSP: return arm_avgpool_s8_get_buffer_size_dsp(out_w, depth);
    case FORGE_CMSIS_NN_MVE: return arm_avgpool_s8_get_buffer_size_mve(out_w, depth);
  }
  return 0;
}

/* SOFTMAX (esp_nn/softmax.cc passes dims[1], dims[2] of the input); CMSIS-NN's softmax
 * adapter requests nothing. */
int32_t forge_softmax_scratch(int kernels, int32_t width, int32_t height) {
  return kernels == FORGE_ESP_NN_S3 ? esp_nn_get_softmax_scratch_size_esp32s3(width, height) : 0;
}
