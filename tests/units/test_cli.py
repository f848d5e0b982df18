import json
import subprocess

import distrain
from distrain.datasets.mnist.idx import MNIST_FILES, read_mnist_split
from tests.conftest import VENV_BIN


def test_data_mnist_sample(tmp_path, cli_env):
    proc = subprocess.run(
        [
            str(VENV_BIN / "distrain"),
            "data",
            "mnist",
            "--sample",
            "--output",
            str(tmp_path),
            "--sample-size",
            "100",
        ],
        capture_output=True,
        text=True,
        env=cli_env,
    )
    assert proc.returncode == 0, proc.stderr
    names = sorted(n for pair in MNIST_FILES.values() for n in pair)
    assert sorted(p.name for p in tmp_path.iterdir()) == names
    images, labels = read_mnist_split(
        tmp_path / "t10k-images-idx3-ubyte.gz", tmp_path / "t10k-labels-idx1-ubyte.gz"
    )
    assert images.shape == (20, 28, 28) and labels.shape == (20,)  # test = a fifth


def test_version_and_help(cli_env):
    out = subprocess.run(
        [str(VENV_BIN / "distrain"), "--version"], capture_output=True, text=True, env=cli_env
    )
    assert out.returncode == 0 and out.stdout.strip() == distrain.__version__
    bad = subprocess.run(
        [str(VENV_BIN / "distrain"), "run", "imagenet", "--output", "x"],
        capture_output=True,
        text=True,
        env=cli_env,
    )
    assert bad.returncode == 2 and "invalid choice: 'imagenet'" in bad.stderr


def test_preprocess_passes_beam_options_through(tmp_path, cli_env, mnist_raw):
    distrain_bin = str(VENV_BIN / "distrain")
    base = [distrain_bin, "preprocess", "mnist", "--data", str(mnist_raw)]
    out = tmp_path / "examples"
    ok = subprocess.run(
        [*base, "--output", str(out), "--seed", "3", "--", "--runner=FnApiRunner"],
        capture_output=True,
        text=True,
        env=cli_env,
    )
    assert ok.returncode == 0, ok.stderr[-3000:]
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["input_records"] == {"train": 1500, "test": 300} and meta["config"]["seed"] == 3
    assert "mnist preprocessed in" in ok.stdout and f"{out}/metadata.json" in ok.stdout
    # Everything after -- is Beam's: a runner Beam does not know fails with Beam's error.
    bad = subprocess.run(
        [*base, "--output", str(tmp_path / "o2"), "--", "--runner=NoSuchRunner", "--x", "y"],
        capture_output=True,
        text=True,
        env=cli_env,
    )
    assert bad.returncode != 0 and "NoSuchRunner" in bad.stderr
    missing = subprocess.run(
        [distrain_bin, "preprocess", "dbpedia", "--data", str(tmp_path / "nope"), "--output", "o"],
        capture_output=True,
        text=True,
        env=cli_env,
    )
    assert missing.returncode == 2 and "does not exist" in missing.stderr
