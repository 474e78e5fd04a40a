"""Keras/ONNX -> BN-folded full-int8 .tflite with FORGE_RECALIB (forge_tflm.converter)."""
