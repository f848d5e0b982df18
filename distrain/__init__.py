"""distrain: distributed TensorFlow training pipelines for Kubeflow."""

import os

# tf-keras (Keras 2) is the Keras of this project: Keras 3 variables break
# hvd.DistributedGradientTape and Keras 3 has no parameter-server training.
# This must be set before TensorFlow is first imported.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

__version__ = "0.1.0"
