"""The pipelines: compiled by both compilers, and run whole by kfp.local."""

import json
import subprocess
import sys

import pytest
import yaml

from distrain.base.images import BEAM_IMAGE, TRAINER_IMAGE
from distrain.datasets import DEFAULT_RUNS
from tests.conftest import ROOT, VENV_BIN


def _load(path):
    """The pipeline spec, with kfp-kubernetes' platform spec (a second document) under
    ``_platform``."""
    docs = list(yaml.safe_load_all(path.read_text()))
    spec = docs[0]
    spec["_platform"] = docs[1]["platforms"]["kubernetes"] if len(docs) > 1 else {}
    return spec


DATASETS = ["mnist", "dbpedia", "gutenberg"]


def _param(name: str) -> str:
    return "{{$.inputs.parameters['pipelinechannel--" + name + "']}}"


def _check_ir(spec: dict, dataset: str, beam=BEAM_IMAGE, trainer=TRAINER_IMAGE) -> None:
    assert spec["pipelineInfo"]["name"] == f"distrain-{dataset}"
    executors = spec["deploymentSpec"]["executors"]
    images = {name: e["container"]["image"] for name, e in executors.items()}
    # Data steps run the Beam image and training the trainer image, both pipeline
    # parameters whose defaults are the configured images; the other steps name the
    # trainer image directly.
    assert images.pop("exec-check-parameters") == _param("beam_image")
    assert images.pop("exec-fetch-data") == _param("beam_image")
    assert images.pop("exec-preprocess") == _param("beam_image")
    assert images.pop("exec-train") == _param("trainer_image")
    assert images.pop("exec-evaluate") == _param("trainer_image")  # rebuilds a user's model
    assert set(images.values()) == {trainer}
    params = spec["root"]["inputDefinitions"]["parameters"]
    assert params["beam_image"]["defaultValue"] == beam
    assert params["trainer_image"]["defaultValue"] == trainer
    tasks = spec["root"]["dag"]["tasks"]
    assert {"fetch-data", "preprocess", "baseline", "compare"} <= set(tasks)
    loop = next(t for name, t in tasks.items() if name.startswith("for-loop"))
    # The loop runs over the checked trainings: each run spec `repeats` times, a seed each.
    assert loop["parameterIterator"]["items"]["inputParameter"] == (
        "pipelinechannel--check-parameters-Output"
    )
    inner = spec["components"][loop["componentRef"]["name"]]["dag"]["tasks"]
    assert {"train", "evaluate"} <= set(inner)
    train_inputs = inner["train"]["inputs"]["parameters"]
    assert train_inputs["seed"]["parameterExpressionSelector"] == 'parseJson(string_value)["seed"]'
    assert train_inputs["run_spec"]["parameterExpressionSelector"] == (
        'parseJson(string_value)["run_spec"]'
    )
    # A cached time is not a measurement: training is never served from the cache.
    assert not inner["train"].get("cachingOptions", {}).get("enableCache")
    assert tasks["preprocess"]["cachingOptions"]["enableCache"]
    defaults = spec["root"]["inputDefinitions"]["parameters"]
    assert defaults["runs"]["defaultValue"] == DEFAULT_RUNS
    assert defaults["repeats"]["defaultValue"] == 1
    # Runs stop on a validation plateau by default; epochs are the most.
    assert defaults["until_plateau"]["defaultValue"] == 3
    model = {"mnist": "mlp", "dbpedia": "fasttext", "gutenberg": "lstm"}[dataset]
    assert defaults["model"]["defaultValue"] == model
    # Sync runs' Horovod controller is a pipeline parameter, checked first, used by training.
    assert defaults["controller"]["defaultValue"] == "auto"
    check = spec["components"][tasks["check-parameters"]["componentRef"]["name"]]
    assert "controller" in check["inputDefinitions"]["parameters"]
    assert inner["train"]["inputs"]["parameters"]["controller"]["componentInputParameter"] == (
        "pipelinechannel--controller"
    )
    # Beam options pass through as one list parameter, to the preprocessing step.
    assert defaults["beam_args"]["parameterType"] == "LIST"
    assert defaults["beam_args"].get("defaultValue", []) == []
    assert "beam_runner" not in defaults
    assert tasks["preprocess"]["inputs"]["parameters"]["beam_args"] == {
        "componentInputParameter": "beam_args"
    }
    # No component installs packages at run time: the images carry distrain and kfp.
    for executor in executors.values():
        assert "pip install" not in " ".join(executor["container"]["command"])


@pytest.mark.parametrize("dataset", DATASETS)
def test_distrain_compile(tmp_path, cli_env, dataset):
    out = tmp_path / f"{dataset}.yaml"
    subprocess.run(
        [str(VENV_BIN / "distrain"), "compile", dataset, "--output", str(out)],
        check=True,
        env=cli_env,
    )
    _check_ir(_load(out), dataset)


@pytest.mark.parametrize("dataset", DATASETS)
def test_kfp_dsl_compile(tmp_path, cli_env, dataset):
    out = tmp_path / f"{dataset}.yaml"
    # `kfp dsl compile --py pipelines/dataset_pipelines.py --function NAME_pipeline`, run
    # as the `kfp` console script runs it, by this interpreter.
    subprocess.run(
        [
            sys.executable,
            "-c",
            "from kfp.cli.__main__ import main; main()",
            "dsl",
            "compile",
            "--py",
            str(ROOT / "pipelines" / "dataset_pipelines.py"),
            "--function",
            f"{dataset}_pipeline",
            "--output",
            str(out),
        ],
        check=True,
        env=cli_env,
        cwd=tmp_path,
    )
    _check_ir(_load(out), dataset)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--runs", "sync:0"], "workers must be a positive integer"),
        (["--runs", "ring:2"], "unknown mode 'ring'"),
        (["--runs", "syncreplicas:2:aggregate=3"], "replicas_to_aggregate must be between"),
        (["--data", "/nonexistent/mnist"], "data directory /nonexistent/mnist does not exist"),
        (["--controller", "nccl"], "invalid choice: 'nccl'"),
        (["--repeats", "0"], "--repeats must be between 1 and 50, got 0"),
        (["--plan", "workers=0"], "needs workers=N with N at least 1"),
    ],
)
def test_run_refuses_bad_parameters_before_any_work(tmp_path, cli_env, args, message):
    proc = subprocess.run(
        [str(VENV_BIN / "distrain"), "run", "mnist", "--output", str(tmp_path / "o"), *args],
        capture_output=True,
        text=True,
        env=cli_env,
    )
    assert proc.returncode == 2
    assert message in proc.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
@pytest.mark.horovod
def test_local_pipeline_run_end_to_end(tmp_path, cli_env, mnist_raw):
    out = tmp_path / "out"
    # --open hands the comparison's page to the web browser ($BROWSER: a script noting it).
    browser = tmp_path / "browser.sh"
    browser.write_text(f'#!/bin/sh\necho "$1" > {tmp_path}/opened\n')
    browser.chmod(0o755)
    proc = subprocess.run(
        [
            str(VENV_BIN / "distrain"),
            "run",
            "mnist",
            "--data",
            str(mnist_raw),
            "--output",
            str(out),
            "--epochs",
            "2",
            "--gate",
            "accuracy>=0.5",
            "--open",
        ],
        capture_output=True,
        text=True,
        env=dict(cli_env, BROWSER=str(browser)),
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # The quality-gate step ran on the comparison and passed.
    assert "**PASSED**" in proc.stdout + proc.stderr
    comparison = json.loads((out / "comparison.json").read_text())
    rows = {row["name"]: row for row in comparison["rows"]}
    assert set(rows) == {"single:1", "sync:2", "async:2", "syncreplicas:3", "majority"}
    assert rows["majority"]["mode"] == "baseline"
    assert rows["single:1"]["speedup"] == pytest.approx(1.0)
    for row in rows.values():
        if row["mode"] == "baseline":
            assert row["accuracy"] < 0.2  # always the most frequent digit
            continue
        assert 0.5 < row["accuracy"] <= 1.0
        assert row["examples_per_second"] > 0
    assert comparison["best"] in rows
    assert rows["async:2"]["staleness_max"] > 0
    assert rows["sync:2"]["staleness_max"] == 0
    assert rows["syncreplicas:3"]["aggregation"] == "2/3"
    assert rows["sync:2"]["transport"] in ("mpi", "gloo")
    assert rows["async:2"]["transport"] == "grpc"
    # Each parameter-server worker's own loss, as each sync rank's.
    for name in ("sync:2", "async:2"):
        assert len(rows[name]["rank_loss"].split(" / ")) == 2
    assert len(rows["syncreplicas:3"]["rank_loss"].split(" / ")) == 3
    assert "syncreplicas:3" in (out / "comparison.md").read_text()
    assert "data:image/png;base64," in (out / "comparison.html").read_text()
    # Progress and the final table were printed.
    assert "epoch 2/2" in proc.stdout + proc.stderr
    tail = proc.stdout[proc.stdout.rindex("pipeline finished") - 2000 :]
    assert all(name in tail for name in rows)
    page = (out / "comparison.html").resolve().as_uri()
    assert proc.stdout.strip().splitlines()[-1] == f"comparison (table and plots): {page}"
    assert (tmp_path / "opened").read_text().strip() == page


@pytest.mark.slow
@pytest.mark.parametrize(
    "dataset, runs, size, best_metric",
    [
        ("dbpedia", "single:1,async:2", "1400", "accuracy"),
        ("gutenberg", "single:1,sync:2,async:2", "30000", "bits_per_char"),
    ],
)
def test_text_pipelines_run_end_to_end(tmp_path, cli_env, dataset, runs, size, best_metric):
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            str(VENV_BIN / "distrain"),
            "run",
            dataset,
            "--output",
            str(out),
            "--runs",
            runs,
            "--sample-size",
            size,
            "--epochs",
            "2",
        ],
        capture_output=True,
        text=True,
        env=cli_env,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    comparison = json.loads((out / "comparison.json").read_text())
    rows = {row["name"]: row for row in comparison["rows"]}
    baseline = "majority"
    if dataset != "dbpedia":  # the best Kneser-Ney order of 3 to 7, named in the row
        baseline = next(name for name, row in rows.items() if row["mode"] == "baseline")
        assert baseline in {f"{n}-gram KN" for n in range(3, 8)}
    assert set(rows) == {
        *(r.split(":")[0] + ":" + r.split(":")[1] for r in runs.split(",")),
        baseline,
    }
    assert rows[baseline]["mode"] == "baseline" and rows[baseline].get("train_seconds") is None
    assert comparison["best"] != baseline
    for name in runs.split(","):
        assert rows[name][best_metric] is not None
    if dataset == "dbpedia":
        assert rows["majority"]["accuracy"] == pytest.approx(1 / 14, abs=0.03)
    else:
        # Far better than a uniform guess over the ~56 characters (5.8 bits/char).
        assert rows[baseline]["bits_per_char"] < 4.0
        assert len(rows["single:1"]["sample"]) == 300
        assert "Text generated by single:1" in (out / "comparison.md").read_text()


def test_pipeline_modules_are_importable_by_path():
    # `kfp dsl compile --py` imports the file by path; it must not rely on relative imports.
    path = ROOT / "pipelines" / "dataset_pipelines.py"
    code = f"import runpy; names = runpy.run_path({str(path)!r}); print(sorted(names))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    for dataset in DATASETS:
        assert f"'{dataset}_pipeline'" in proc.stdout


def test_compiled_pipeline_names_the_configured_registry(tmp_path, cli_env):
    import distrain

    out = tmp_path / "mnist.yaml"
    env = dict(cli_env, DISTRAIN_IMAGE_REGISTRY="registry.example.com/team/")
    subprocess.run(
        [str(VENV_BIN / "distrain"), "compile", "mnist", "--output", str(out)], check=True, env=env
    )
    v = distrain.__version__
    _check_ir(
        _load(out),
        "mnist",
        beam=f"registry.example.com/team/beam:{v}",
        trainer=f"registry.example.com/team/trainer:{v}",
    )


def test_gpu_placement_comes_from_pipeline_parameters(tmp_path, cli_env):
    import distrain

    out = tmp_path / "mnist-gpu.yaml"
    subprocess.run(
        [str(VENV_BIN / "distrain"), "compile", "mnist", "--gpu", "--output", str(out)],
        check=True,
        env=cli_env,
    )
    spec = _load(out)
    params = spec["root"]["inputDefinitions"]["parameters"]
    assert params["trainer_image"]["defaultValue"] == f"distrain/trainer-gpu:{distrain.__version__}"
    assert params["accelerator_count"]["defaultValue"] == 1
    assert params["gpus_per_worker"]["defaultValue"] == 1
    assert params["node_selector"]["parameterType"] == "STRUCT"
    assert params["tolerations"]["parameterType"] == "LIST"

    train = spec["deploymentSpec"]["executors"]["exec-train"]["container"]
    assert train["resources"]["accelerator"] == {
        "resourceType": _param("accelerator_type"),
        "resourceCount": _param("accelerator_count"),
    }
    placement = spec["_platform"]["deploymentSpec"]["executors"]["exec-train"]
    assert placement["nodeSelector"]["nodeSelectorJson"] == {
        "componentInputParameter": "pipelinechannel--node_selector"
    }
    assert placement["tolerations"] == [
        {"tolerationJson": {"componentInputParameter": "pipelinechannel--tolerations"}}
    ]
    assert placement["pvcMount"][0]["mountPath"] == "/mnt/distrain"
    # Only training steps are placed on the GPU pool; the push step only mounts the
    # shared volume its serving_dir lives on.
    executors = spec["_platform"]["deploymentSpec"]["executors"]
    assert set(executors) == {"exec-train", "exec-push"}
    assert set(executors["exec-push"]) == {"pvcMount"}

    # The channels lead to the pipeline's own parameters, and the launched pods get the
    # same selector, tolerations and GPU count.
    tasks = spec["root"]["dag"]["tasks"]
    loop = next(t for name, t in tasks.items() if name.startswith("for-loop"))
    for name in ("node_selector", "tolerations", "accelerator_type", "accelerator_count"):
        assert loop["inputs"]["parameters"][f"pipelinechannel--{name}"] == {
            "componentInputParameter": name
        }
    inner = spec["components"][loop["componentRef"]["name"]]["dag"]["tasks"]["train"]
    args = inner["inputs"]["parameters"]
    for name in ("node_selector", "tolerations", "gpus_per_worker", "launcher"):
        assert args[name] == {"componentInputParameter": f"pipelinechannel--{name}"}
    assert args["worker_image"] == {"componentInputParameter": "pipelinechannel--trainer_image"}


def test_quality_gate_step_fails_a_local_run(tmp_path):
    from kfp import dsl, local
    from kfp.dsl import Artifact, Output

    from distrain.components.gate import quality_gate

    @dsl.component(base_image=TRAINER_IMAGE, install_kfp_package=False)
    def fake_comparison(comparison: Output[Artifact]):
        import json
        import os

        os.makedirs(comparison.path, exist_ok=True)
        rows = [{"name": "sync:2", "mode": "sync", "accuracy": 0.9}]
        with open(f"{comparison.path}/comparison.json", "w") as f:
            json.dump({"best": "sync:2", "rows": rows}, f)

    @dsl.pipeline(name="gate-check")
    def gated(gate: str):
        quality_gate(comparison=fake_comparison().outputs["comparison"], gate=gate)

    local.init(
        runner=local.SubprocessRunner(use_venv=False),
        pipeline_root=str(tmp_path),
        raise_on_error=True,
    )
    gated(gate="accuracy>=0.85")
    with pytest.raises(RuntimeError, match="quality-gate"):
        gated(gate="accuracy>=0.95")


def test_beam_args_reach_the_preprocessing_step_in_kfp_local(tmp_path, mnist_raw):
    from kfp import dsl, local

    from distrain.components.data import fetch_data, preprocess

    @dsl.pipeline(name="beam-args")
    def prep(source: str, beam_args: list[str]):
        data = fetch_data(dataset="mnist", source=source)
        preprocess(raw=data.outputs["raw"], dataset="mnist", beam_args=beam_args)

    local.init(
        runner=local.SubprocessRunner(use_venv=False),
        pipeline_root=str(tmp_path / "root"),
        raise_on_error=True,
    )
    # A runner that does not exist fails the step: the options reach Beam.
    with pytest.raises(RuntimeError, match="preprocess"):
        prep(source=str(mnist_raw), beam_args=["--runner=NoSuchRunner"])
    prep(source=str(mnist_raw), beam_args=["--runner=FnApiRunner", "--direct_num_workers=1"])
    metadata = list((tmp_path / "root").rglob("examples/metadata.json"))
    assert len(metadata) == 1
    assert json.loads(metadata[0].read_text())["input_records"] == {"train": 1500, "test": 300}


@pytest.mark.parametrize("dataset", DATASETS)
def test_compiled_pipelines_export_the_picked_run_and_push_it(tmp_path, dataset):
    """After the gate: the export step's own Model artifact, then push under `export`."""
    from kfp import compiler

    from distrain.pipelines.dataset_pipelines import PIPELINES

    out = tmp_path / f"{dataset}.yaml"
    compiler.Compiler().compile(PIPELINES[dataset], str(out))
    spec = _load(out)
    _check_ir(spec, dataset)
    params = spec["root"]["inputDefinitions"]["parameters"]
    assert params["export"]["defaultValue"] is True
    assert params["serving_dir"]["defaultValue"] == "/mnt/distrain/serving"
    assert params["model_name"]["defaultValue"] == f"distrain-{dataset}"
    tasks = spec["root"]["dag"]["tasks"]
    export = tasks["export-model"]
    assert "quality-gate" in export["dependentTasks"]
    artifacts = export["inputs"]["artifacts"]
    assert (
        artifacts["trained"]["taskOutputArtifact"]["outputArtifactKey"]
        == "pipelinechannel--train-trained"
    )
    assert artifacts["reports"]["taskOutputArtifact"]["outputArtifactKey"] == (
        "pipelinechannel--evaluate-report"
    )
    assert export["inputs"]["parameters"]["export"] == {"componentInputParameter": "export"}
    component = spec["components"][export["componentRef"]["name"]]
    model = component["outputDefinitions"]["artifacts"]["model"]["artifactType"]
    assert model["schemaTitle"] == "system.Model"
    # The push step: in the branch the `export` parameter opens, reading the exported model.
    condition = next(t for name, t in tasks.items() if name.startswith("condition"))
    assert condition["triggerPolicy"]["condition"] == (
        "inputs.parameter_values['pipelinechannel--export'] == true"
    )
    branch = spec["components"][condition["componentRef"]["name"]]["dag"]["tasks"]
    push = branch["push"]
    assert push["inputs"]["artifacts"]["model"]["componentInputArtifact"] == (
        "pipelinechannel--export-model-model"
    )
    assert push["inputs"]["parameters"]["serving_dir"] == {
        "componentInputParameter": "pipelinechannel--serving_dir"
    }
    pushed = spec["components"][push["componentRef"]["name"]]["outputDefinitions"]["artifacts"]
    assert pushed["pushed"]["artifactType"]["schemaTitle"] == "system.Model"
    assert "inference_service" in pushed
    # It mounts the shared volume, where serving_dir is by default.
    mounts = spec["_platform"]["deploymentSpec"]["executors"]["exec-push"]["pvcMount"]
    assert mounts[0]["mountPath"] == "/mnt/distrain"
