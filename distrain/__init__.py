"""distrain: distributed TensorFlow training pipelines for Kubeflow."""

import os

# tf-keras (Keras 2) is the Keras of this project: Keras 3 variables break
# hvd.DistributedGradientTape and Keras 3 has no parameter-server training.
# This must be set before TensorFlow is first imported.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# oneDNN's CPU kernels. TensorFlow turns them on by itself only on CPUs with AVX-512 (VNNI,
# BF16) or AMX; on AVX2 machines its own kernels train the digits' CNN 2.6x slower and the
# fastText model 1.3x slower (benchmarks: 2-core AMD EPYC without AVX-512). Set it to 0 to
# turn them off (oneDNN sums in another order: results differ in the last bits).
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")

__version__ = "0.1.0"
