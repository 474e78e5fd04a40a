"""What the tests and the benchmarks share, as numpy.testing is numpy's: hostile-input
generators, oracles and reference models. Nothing else in forge_tflm imports it.

    artifact_fuzz, manifest_fuzz      mutated FORGE artifacts and manifests (eval's loading)
    convert_fuzz, sites_fuzz          mutated int8 models and sites files (convert)
    resume_fuzz                       mutated resume files (eval --resume)
    deploy_fuzz, device_logs          mutated device logs and PPK2 captures; genuine logs
    options_crosscheck                option buffers: the C++ parser against the decoder
    tiny_models, torch_models         small Keras models; PyTorch networks people ship
    c_test_vectors                    the op's C tests' vectors, from the numpy reference

This file imports nothing: Keras, PyTorch and the rest load only with the module that
needs them (`from forge_tflm.testing import torch_models`).
"""
