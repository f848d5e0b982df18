"""A model from the user's code through the modes, the command line and a pipeline."""

import os
import shutil
import subprocess
import time

import pytest
import yaml

from distrain import datasets
from distrain.steps import evaluate, train
from tests.conftest import ROOT, VENV_BIN

EXAMPLE = ROOT / "examples" / "my_model.py"
# Ten classes: chance is 0.1. Three epochs of the example's perceptron on the 1,350 training
# images of the generated sample reach 0.7 or more in every mode (measured on 2 cores).
LEARNABLE = 0.5


def _val_accuracy(history: dict) -> float:
    return max(e["val_accuracy"] for e in history["epochs"] if e.get("val_accuracy") is not None)


def test_the_pipeline_compiles_with_a_model_artifact(tmp_path):
    from kfp import compiler, dsl

    from distrain.pipelines.common import build_pipeline

    mnist = build_pipeline(datasets.get("mnist").pipeline)

    @dsl.pipeline(name="my-model-on-mnist")
    def mine(model_uri: str = "gs://team/models/my_model.py"):
        found = dsl.importer(artifact_uri=model_uri, artifact_class=dsl.Artifact)
        mnist(model="my_model.py:build", model_file=found.output)

    out = tmp_path / "mine.yaml"
    compiler.Compiler().compile(mine, str(out))
    spec = next(yaml.safe_load_all(out.read_text()))
    inner = spec["components"]["comp-distrain-mnist"]
    assert inner["inputDefinitions"]["artifacts"]["model_file"]["isOptional"] is True
    tasks = inner["dag"]["tasks"]
    check = tasks["check-parameters"]["inputs"]["artifacts"]["model_file"]
    assert check == {"componentInputArtifact": "model_file"}
    loop = next(t for name, t in tasks.items() if name.startswith("for-loop"))
    body = spec["components"][loop["componentRef"]["name"]]["dag"]["tasks"]
    passed = body["train"]["inputs"]["artifacts"]["model_file"]
    assert passed == {"componentInputArtifact": "pipelinechannel--model_file"}
    outer = spec["root"]["dag"]["tasks"]["distrain-mnist"]["inputs"]
    assert outer["artifacts"]["model_file"]["taskOutputArtifact"]["producerTask"] == "importer"
    assert outer["parameters"]["model"]["runtimeValue"]["constant"] == "my_model.py:build"
    # kfp.local takes no input artifact, not even an optional one left out: the local form
    # (distrain run's) has none, its steps read the file where the model names it.
    local = build_pipeline(datasets.get("mnist").pipeline, cluster=False)
    assert "model_file" not in local.component_spec.inputs


@pytest.mark.slow
def test_a_model_file_trains_alone_and_a_pipeline_artifact_travels_with_it(
    tmp_path, mnist_examples
):
    # As a pipeline's training step gets it: the artifact's path has no .py suffix.
    artifact = tmp_path / "artifact"
    shutil.copyfile(EXAMPLE, artifact)
    out = tmp_path / "single"
    history = train(
        mnist_examples,
        out,
        "single:1",
        model="my_model.py:build",
        model_file=str(artifact),
        epochs=3,
    )
    assert _val_accuracy(history) > LEARNABLE
    assert history["run"]["model"] == f"{out}/user_model/my_model.py:build"
    assert (out / "user_model" / "my_model.py").read_text() == EXAMPLE.read_text()
    # The evaluation step sees the output elsewhere (another pod): it rebuilds the model
    # from the copy in it, and loads the saved one without the user's file.
    moved = tmp_path / "elsewhere"
    shutil.move(out, moved)
    report = evaluate(mnist_examples, moved)
    assert report["evaluation"]["accuracy"] > LEARNABLE
    assert report["evaluation"]["model_profile"]["parameters"] == 101_770


@pytest.mark.slow
@pytest.mark.parametrize(
    "run",
    [
        pytest.param("sync:2", marks=pytest.mark.horovod),
        # A functional model cut into stages, as a Sequential one is.
        pytest.param("pipeline:2", marks=pytest.mark.horovod),
        "async:2",
        "avg:2:period=8",
    ],
)
def test_a_module_model_trains_in_the_modes(run, tmp_path, mnist_examples, monkeypatch):
    # package.module:FUNCTION, as a module installed in the image: on every process's path.
    monkeypatch.setenv(
        "PYTHONPATH", f"{ROOT / 'examples'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
    )
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    history = train(mnist_examples, tmp_path / "o", run, model="my_model:build", epochs=3)
    assert history["run"]["model"] == "my_model:build"
    assert _val_accuracy(history) > LEARNABLE


def test_bad_user_code_fails_the_command_in_seconds_with_one_line(
    tmp_path, mnist_examples, cli_env
):
    bad = tmp_path / "bad_model.py"
    bad.write_text("import tf_keras as keras\n\n\ndef build(info, seed):\n    return 'a model'\n")
    start = time.perf_counter()
    done = subprocess.run(
        [
            str(VENV_BIN / "python"),
            "-m",
            "distrain",
            "train",
            "--data",
            str(mnist_examples),
            "--output",
            str(tmp_path / "o"),
            "--run",
            "async:2",
            "--model",
            f"{bad}:build",
        ],
        capture_output=True,
        text=True,
        env=cli_env,
        timeout=120,
    )
    elapsed = time.perf_counter() - start
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("distrain:")]
    assert lines == [
        f"distrain: train async:2 failed: {bad}:4: build returned a builtins.str, "
        "not a tf-keras model"
    ]
    assert not (tmp_path / "o" / "logs").exists()  # no worker or server was started
    assert elapsed < 60, elapsed  # about 10 s on 2 busy cores: TensorFlow's import


@pytest.mark.slow
def test_distrain_run_takes_a_model_file_through_the_whole_pipeline(tmp_path, cli_env):
    # From another folder, a relative path: the steps run elsewhere and get it absolute.
    shutil.copyfile(EXAMPLE, tmp_path / "my_model.py")
    done = subprocess.run(
        [
            str(VENV_BIN / "python"), "-m", "distrain", "run", "mnist",
            "--model", "my_model.py:build", "--runs", "single:1", "--epochs", "2",
            "--sample-size", "600", "--output", str(tmp_path / "out"),
        ],
        capture_output=True, text=True, env=cli_env, cwd=tmp_path, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    comparison = (tmp_path / "out" / "comparison.json").read_text()
    assert f'"model": "{tmp_path}/my_model.py:build"' in comparison
    assert "majority" in done.stdout and "single:1" in done.stdout


def test_distrain_run_imports_the_model_before_any_step(tmp_path, cli_env):
    bad = tmp_path / "bad_model.py"
    bad.write_text("import tf_keras as keras\nimport no_such_module_xyz\n")
    start = time.perf_counter()
    done = subprocess.run(
        [
            str(VENV_BIN / "python"), "-m", "distrain", "run", "mnist",
            "--model", f"{bad}:build", "--output", str(tmp_path / "out"),
        ],
        capture_output=True, text=True, env=cli_env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("distrain:")]
    assert lines == [
        f"distrain: run mnist failed: {bad}:2: ModuleNotFoundError: No module named "
        "'no_such_module_xyz'"
    ]
    assert not (tmp_path / "out").exists()  # no step ran
    assert time.perf_counter() - start < 60


def _distrain(args, cli_env, **kwargs):
    return subprocess.run(
        [str(VENV_BIN / "python"), "-m", "distrain", *args],
        capture_output=True,
        text=True,
        env=cli_env,
        timeout=kwargs.pop("timeout", 300),
        **kwargs,
    )


def _lines(done) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.startswith("distrain:")]


# The user's code ending the process: (source, the line named, what the line says).
NO_RESULT = "it would end the process with no result"
ENDINGS = {
    "sys-exit": ("import sys\n\nsys.exit(0)\n", 3, f"sys.exit(0) called: {NO_RESULT}"),
    "systemexit": ('x = 1\nraise SystemExit("bye")\n', 2, f"SystemExit: bye ({NO_RESULT})"),
    "os-exit-in-build": (
        "import os\n\n\ndef build(info, seed):\n    os._exit(0)\n",
        5,
        f"os._exit(0) called: {NO_RESULT} (in build)",
    ),
}


@pytest.mark.case("usermodel/exit")
@pytest.mark.parametrize("case", sorted(ENDINGS))
def test_a_model_file_that_ends_the_process_fails_the_command_naming_its_line(
    case, tmp_path, mnist_examples, cli_env
):
    source, line, says = ENDINGS[case]
    bad = tmp_path / "ending_model.py"
    bad.write_text(source)
    done = _distrain(
        ["train", "--data", str(mnist_examples), "--output", str(tmp_path / "o"),
         "--run", "single:1", "--model", f"{bad}:build"],
        cli_env,
    )  # fmt: skip
    assert done.returncode == 2, (done.returncode, done.stdout[-500:], done.stderr[-2000:])
    assert _lines(done) == [f"distrain: train single:1 failed: {bad}:{line}: {says}"]
    assert not (tmp_path / "o" / "history.json").exists()


@pytest.mark.case("usermodel/exit")
def test_a_model_file_that_exits_at_import_never_passes_the_gate(tmp_path, cli_env):
    bad = tmp_path / "exiting_model.py"
    bad.write_text("import sys\n\nsys.exit(0)\n")
    done = _distrain(
        ["run", "mnist", "--model", f"{bad}:build", "--runs", "single:1", "--epochs", "1",
         "--sample-size", "600", "--gate", "accuracy>=0.5", "--output", str(tmp_path / "out")],
        cli_env,
    )  # fmt: skip
    assert done.returncode == 2, (done.stdout[-500:], done.stderr[-2000:])
    assert _lines(done) == [
        f"distrain: run mnist failed: {bad}:3: sys.exit(0) called: it would end the process "
        "with no result"
    ]
    assert "PASSED" not in done.stdout + done.stderr
    assert not (tmp_path / "out").exists()  # no step ran


@pytest.mark.slow
@pytest.mark.case("train/no-result", "usermodel/exit")
def test_a_training_process_that_exits_0_without_its_result_fails_the_run(
    tmp_path, mnist_examples, cli_env
):
    # Only in the training process (the launcher's check builds it fine), and by a way no
    # guard catches: the process ends with code 0 before it wrote anything.
    bad = tmp_path / "quitting_model.py"
    bad.write_text(
        (EXAMPLE.read_text()) + "\n\ndef quits(info, seed):\n    import os, posix\n\n"
        "    if os.environ.get('DISTRAIN_RUN_DIR'):\n        posix._exit(0)\n"
        "    return build(info, seed)\n"
    )
    out = tmp_path / "o"
    env = {k: v for k, v in cli_env.items() if k != "DISTRAIN_RUN_DIR"}
    done = _distrain(
        ["train", "--data", str(mnist_examples), "--output", str(out), "--run", "single:1",
         "--model", f"{bad}:quits", "--epochs", "1"],
        env,
    )  # fmt: skip
    assert done.returncode == 2, (done.stdout[-500:], done.stderr[-2000:])
    assert _lines(done) == [
        f"distrain: train single:1 failed: [single:1] chief exited with code 0 but produced no "
        f"result: model.keras, history.json not written in {out} by this run (the process was "
        "ended early, as os._exit in the model's code does)"
    ]


@pytest.mark.slow
@pytest.mark.case("usermodel/error-permanent")
def test_an_error_in_a_custom_layer_while_training_is_permanent_and_names_its_line(
    tmp_path, mnist_examples, cli_env
):
    bad = tmp_path / "layer_model.py"
    bad.write_text(
        "import tf_keras as keras\n\n\n"
        "class Net(keras.Model):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.flat = keras.layers.Flatten()\n"
        "        self.dense = keras.layers.Dense(10)\n\n"
        "    def call(self, x):\n"
        "        raise TypeError('expected a dict of features')\n\n\n"
        "def build(info, seed):\n"
        "    return Net()\n"
    )
    out = tmp_path / "o"
    done = _distrain(
        ["train", "--data", str(mnist_examples), "--output", str(out), "--run", "single:1",
         "--model", f"{bad}:build", "--epochs", "1"],
        cli_env,
    )  # fmt: skip
    assert done.returncode == 2, (done.stdout[-500:], done.stderr[-2000:])
    # A subclassed model is called once where it is built (its variables are made there),
    # so the error is the training step's check, before any process starts: one line
    # naming the user's line, permanent.
    last = [line for line in done.stderr.splitlines() if line.startswith("distrain:")][-1]
    assert last.startswith(f"distrain: train single:1 failed: {bad}:11: "), last
    assert "TypeError" in last, last
    assert not (out / "errors").exists() or not list((out / "errors").glob("*.json"))


def _ending_pipeline(kind: str):
    from kfp import dsl

    from distrain.base.images import TRAINER_IMAGE

    @dsl.component(base_image=TRAINER_IMAGE, install_kfp_package=False)
    def ends(counter: str) -> str:
        import os

        with open(counter, "a") as f:
            f.write("x")
        os._exit(0)  # as the user's code could, where no guard is
        return "done"

    @dsl.pipeline(name=f"ends-{kind}")
    def pipeline(counter: str) -> str:
        task = ends(counter=counter)
        task.set_retry(num_retries=2, backoff_duration="1s", backoff_factor=1.0)
        return task.output

    return pipeline


@pytest.mark.case("train/no-result")
def test_a_step_that_exits_0_without_its_outputs_fails_the_local_run_unretried(tmp_path):
    from kfp import local

    from distrain.preprocess.failures import StepFailed, local_retries_stop_on_permanent_errors

    local.init(
        runner=local.SubprocessRunner(use_venv=False),
        pipeline_root=str(tmp_path / "root"),
        raise_on_error=True,
    )
    counter = tmp_path / "counter"
    with local_retries_stop_on_permanent_errors() as failures:
        with pytest.raises(StepFailed) as err:
            _ending_pipeline("local")(counter=str(counter))
    assert counter.read_text() == "x", "a step that produced no result was retried"
    assert [f.retryable for f in failures] == [False]
    line = err.value.failure.line()
    assert line.startswith("distrain: ends failed: the step's process exited 0 but produced no "), (
        line
    )
    assert "executor_output.json" in line
