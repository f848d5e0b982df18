"""The precision setting: resolved from the processor, taken by the models that allow it."""

from types import SimpleNamespace

import numpy as np
import pytest

from distrain.datasets.gutenberg.models import char_lstm
from distrain.learning import precision
from distrain.learning.lm import recurrent_copy
from distrain.train.config import TrainConfig
from distrain.train.runtime import configure_tensorflow

ZEN4 = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16 fma\nbugs\t\t: none\n"
OLD = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f fma\n"


@pytest.fixture
def restore():
    """Each test leaves this process's precision as it found it."""
    before = precision.chosen()
    yield
    precision._chosen = before


def _info(vocab=12):
    return SimpleNamespace(metadata={"vocab_size": vocab})  # all char_lstm reads


def test_the_flags_come_from_the_first_processor_line():
    assert "avx512_bf16" in precision.cpu_flags(ZEN4)
    assert precision.cpu_flags("processor\t: 0\n") == set()


@pytest.mark.parametrize(
    ("choice", "cpuinfo", "gpus", "expected"),
    [
        ("auto", ZEN4, 0, "bfloat16"),
        ("auto", ZEN4, 1, "float32"),  # a GPU: its own precision is not chosen here
        ("auto", OLD, 0, "float32"),  # emulated bfloat16 is slower than float32
        ("float32", ZEN4, 0, "float32"),
        ("bfloat16", OLD, 0, "bfloat16"),  # asked for: given, even where emulated
    ],
)
def test_auto_takes_bfloat16_only_where_it_is_native(choice, cpuinfo, gpus, expected):
    assert precision.resolve(choice, precision.cpu_flags(cpuinfo), gpus) == expected


def test_an_unknown_precision_is_refused():
    with pytest.raises(ValueError, match="float16"):
        precision.resolve("float16", set(), 0)
    with pytest.raises(Exception, match="precision"):
        TrainConfig(data_dir="d", output_dir="o", run="single:1", precision="half")


def test_the_setting_reaches_the_model_through_the_process_set_up(restore, monkeypatch):
    """A training process's set-up resolves the setting; the char LSTM builds with it."""
    import tensorflow as tf

    # This test process's TensorFlow may already run: its thread pools are fixed by then.
    for pool in ("set_intra_op_parallelism_threads", "set_inter_op_parallelism_threads"):
        monkeypatch.setattr(tf.config.threading, pool, lambda n: None)
    cfg = TrainConfig(data_dir="d", output_dir="o", run="single:1", precision="bfloat16")
    configure_tensorflow(cfg)
    model = char_lstm(_info(), seed=0, units=16, embed=4)
    lstm = next(layer for layer in model.layers if type(layer).__name__ == "LSTM")
    assert lstm.compute_dtype == "bfloat16"
    assert lstm.variable_dtype == "float32"  # updates and exchanged gradients stay float32
    assert model.layers[-1].compute_dtype == "float32"  # the logits
    out = model(np.zeros((2, 5), np.int32))
    assert out.dtype.name == "float32"
    configure_tensorflow(
        TrainConfig(data_dir="d", output_dir="o", run="single:1", precision="float32")
    )
    assert {layer.compute_dtype for layer in char_lstm(_info(), 0, units=16).layers} == {"float32"}


def test_scores_use_a_float32_copy_of_a_bfloat16_model(restore):
    """The copy that scores computes in float32 with the same weights: a float32 model's output."""
    precision._chosen = "bfloat16"
    trained = char_lstm(_info(), seed=3, units=16, embed=4, dropout=0)
    precision._chosen = "float32"
    plain = char_lstm(_info(), seed=3, units=16, embed=4, dropout=0)
    plain.set_weights([w + 0.01 for w in trained.get_weights()])  # not the built weights
    trained.set_weights(plain.get_weights())
    x = np.random.default_rng(0).integers(0, 12, (2, 40)).astype(np.int32)
    copy = recurrent_copy(trained, 2, float32=True)
    assert {layer.compute_dtype for layer in copy.layers} == {"float32"}
    want = recurrent_copy(plain, 2)(x).numpy()
    np.testing.assert_allclose(copy(x).numpy(), want, rtol=1e-5, atol=1e-5)
    # ...while the bfloat16 copy that trains differs by bfloat16's rounding, not more.
    rounded = recurrent_copy(trained, 2)(x).numpy()
    assert 0 < np.abs(rounded - want).max() < 0.1


def test_a_run_records_what_its_model_computed_in_not_the_setting(restore):
    """A model that does not opt in computes in float32 even in a bfloat16 process."""
    import tf_keras as keras

    precision._chosen = "bfloat16"
    assert precision.of_model(char_lstm(_info(), 0, units=8, embed=4)) == "bfloat16"
    plain = keras.Sequential([keras.layers.Input((3,)), keras.layers.Dense(2)])
    assert precision.of_model(plain) == "float32"
