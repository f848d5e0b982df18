import numpy as np
import pytest

from distrain.datasets.mnist.idx import IMAGES_MAGIC, mnist_paths, read_idx, read_mnist_split
from distrain.datasets.mnist.sample import MnistSampleConfig, generate_digits, write_mnist_sample


def test_shapes_range_and_balance():
    images, labels = generate_digits(500, seed=3)
    assert images.shape == (500, 28, 28) and images.dtype == np.uint8
    assert labels.dtype == np.uint8 and set(labels.tolist()) == set(range(10))
    assert np.bincount(labels).tolist() == [50] * 10
    assert images.max() > 200  # ink
    # MNIST-like framing: ink sits in the middle, the border is mostly background.
    border = np.concatenate([images[:, :2].ravel(), images[:, -2:].ravel()])
    assert (border > 128).mean() < 0.01
    assert (images[:, 8:20, 8:20] > 128).mean() > 5 * (border > 128).mean()


def test_deterministic_by_seed():
    a = generate_digits(50, seed=1)
    b = generate_digits(50, seed=1)
    c = generate_digits(50, seed=2)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not np.array_equal(a[0], c[0])


def test_written_files_are_real_mnist_and_byte_identical(tmp_path):
    cfg = MnistSampleConfig(train_size=120, test_size=30, seed=5)
    summary = write_mnist_sample(tmp_path / "a", cfg)
    write_mnist_sample(tmp_path / "b", cfg)
    assert summary["counts"] == {"train": 120, "test": 30}
    for split, n in (("train", 120), ("test", 30)):
        images, labels = read_mnist_split(*mnist_paths(tmp_path / "a", split))
        assert images.shape == (n, 28, 28) and labels.shape == (n,)
        for name in mnist_paths(tmp_path / "a", split):
            assert name.read_bytes() == (tmp_path / "b" / name.name).read_bytes()
    train = read_idx(tmp_path / "a" / "train-images-idx3-ubyte.gz", IMAGES_MAGIC)
    test = read_idx(tmp_path / "a" / "t10k-images-idx3-ubyte.gz", IMAGES_MAGIC)
    assert not np.array_equal(train[:30], test)  # test digits are new draws


def test_learnable_but_not_trivial():
    # A nearest-class-mean classifier: far above chance (0.1), far from perfect.
    x, y = generate_digits(2000, seed=10)
    xt, yt = generate_digits(500, seed=11)
    x, xt = x.reshape(len(x), -1) / 255.0, xt.reshape(len(xt), -1) / 255.0
    means = np.stack([x[y == k].mean(axis=0) for k in range(10)])
    pred = np.argmin(((xt[:, None, :] - means[None]) ** 2).sum(axis=2), axis=1)
    accuracy = (pred == yt).mean()
    assert 0.5 < accuracy < 0.97, accuracy


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"train_size": 0}, "sample sizes must be positive"),
        ({"test_size": -1}, "sample sizes must be positive"),
        ({"image_size": 4}, "image_size must be at least 8"),
        ({"speck_probability": 2.0}, "speck_probability"),
        ({"noise": -0.1}, "must not be negative"),
    ],
)
def test_config_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MnistSampleConfig(**kwargs)
