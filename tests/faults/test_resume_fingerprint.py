"""A resume goes on only under the settings its checkpoint was made with (issue 49).

Before, a rerun with another learning rate, or after the user's model file was edited,
continued from the old checkpoint without a word, and history.json recorded the new rate
for every epoch. A checkpoint's fingerprint now holds what decides the updates to come
(:mod:`distrain.train.fingerprint`); a resume under other settings is refused, naming
each, and ``--restart`` starts over, setting the old checkpoints aside.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

EXAMPLE = ROOT / "examples" / "my_model.py"
CASE = "integrity/checkpoint-fingerprint"


def _replica(data, out, **settings):
    from distrain.train.config import TrainConfig
    from distrain.train.replica import Replica

    settings.setdefault("model", "softmax")
    return Replica(TrainConfig(data_dir=str(data), output_dir=str(out), **settings))


def _checkpointed(data, out, step=5, **settings):
    first = _replica(data, out, **settings)
    first.version.assign(step)
    first.checkpoint(step)
    return first


@pytest.mark.case(CASE)
@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"learning_rate": 0.01}, "learning_rate 0.001 → 0.01"),
        ({"batch_size": 32}, "batch_size 64 → 32"),
        ({"seed": 3}, "seed 0 → 3"),
        ({"scale_learning_rate": False}, "scale_learning_rate True → False"),
        ({"run": "sync:2"}, "run single:1 → sync:2"),
    ],
)
def test_a_resume_with_a_setting_that_changes_the_updates_is_refused_naming_it(
    mnist_examples, tmp_path, change, named
):
    from distrain.base.errors import ConfigError
    from distrain.preprocess.failures import Failure

    out = tmp_path / "run"
    _checkpointed(mnist_examples, out)
    other = _replica(mnist_examples, out, **change)
    with pytest.raises(ConfigError) as refused:
        other.restore()
    line = str(refused.value)
    assert "\n" not in line and "ckpt-5: a checkpoint of another model, data or settings (" in line
    assert named in line and "--restart" in line
    assert other.step == 0  # nothing restored
    failure = Failure.of("train", refused.value)
    assert not failure.retryable and failure.exit_code == 2


@pytest.mark.case(CASE)
def test_a_schedule_spanning_the_epochs_resumes_only_over_the_same_span(
    mnist_examples, tmp_path, monkeypatch
):
    # SGD's rate falls to zero over the schedule's epochs (fastText's recipe). A search's
    # rung of 1 epoch and its survivor's rung of 4 train one 4-epoch schedule
    # (schedule_epochs), so the survivor resumes; a run of 1 epoch whose own schedule
    # ended there is not resumed for 4 (its rate would jump back up), and says why.
    from distrain.base.errors import ConfigError
    from distrain.datasets import ModelSpec

    monkeypatch.setattr(ModelSpec, "optimizer_for", lambda self, info: "sgd")
    rung = tmp_path / "rung"
    _checkpointed(mnist_examples, rung, epochs=1, schedule_epochs=4)
    survivor = _replica(mnist_examples, rung, epochs=4, schedule_epochs=4)
    survivor.restore()
    assert survivor.step == 5
    ended = tmp_path / "ended"
    _checkpointed(mnist_examples, ended, epochs=1)
    with pytest.raises(ConfigError) as refused:
        _replica(mnist_examples, ended, epochs=4).restore()
    assert "linear decay to 0 over 1 epochs → linear decay to 0 over 4 epochs" in str(refused.value)


@pytest.mark.case(CASE)
def test_settings_that_do_not_change_the_updates_still_resume(mnist_examples, tmp_path):
    out = tmp_path / "run"
    first = _checkpointed(mnist_examples, out)
    weights = [w.numpy() for w in first.model.weights]
    again = _replica(
        mnist_examples,
        out,
        epochs=9,
        checkpoint_every_steps=7,
        checkpoint_every_epochs=2,
        validation_freq=3,
        deadline=60,
        operation_timeout=30,
        start_timeout=30,
        threads_per_worker=1,
        dump_rank_weights=True,
        # The model computes in float32 whatever is chosen (softmax does not opt in).
        precision="bfloat16",
    )
    assert again.restore().endswith("ckpt-5") and again.step == 5 and not again.notes
    for a, b in zip(weights, again.model.weights, strict=True):
        assert (a == b.numpy()).all()


@pytest.mark.case(CASE)
def test_a_resume_after_the_user_edited_the_model_file_is_refused_naming_its_digest(
    mnist_examples, tmp_path
):
    from distrain.base.errors import ConfigError

    mine = tmp_path / "my_model.py"
    shutil.copyfile(EXAMPLE, mine)
    model = f"{mine}:build"
    out = tmp_path / "run"
    _checkpointed(mnist_examples, out, model=model)
    assert _replica(mnist_examples, out, model=model).restore().endswith("ckpt-5")
    # The same shapes, another model: a change the variables' shapes cannot tell.
    mine.write_text(EXAMPLE.read_text().replace('activation="relu"', 'activation="tanh"'))
    with pytest.raises(ConfigError, match=r"model_file sha256:[0-9a-f]{16} → sha256:[0-9a-f]{16}"):
        _replica(mnist_examples, out, model=model).restore()


@pytest.mark.case(CASE)
def test_the_data_is_checked_by_its_manifest_not_its_folder(mnist_examples, tmp_path):
    from distrain.base.errors import ConfigError

    out = tmp_path / "run"
    _checkpointed(mnist_examples, out)
    # The same data in another folder (a cluster run stages a copy per attempt): resumes.
    moved = tmp_path / "moved"
    shutil.copytree(mnist_examples, moved)
    meta = json.loads((moved / "metadata.json").read_text())
    meta["config"]["output_dir"] = str(moved)
    (moved / "metadata.json").write_text(json.dumps(meta))
    assert _replica(moved, out).restore().endswith("ckpt-5")
    # Other data of the same shapes (preprocessed with another split seed): refused.
    meta["config"]["seed"] = 1
    (moved / "metadata.json").write_text(json.dumps(meta))
    with pytest.raises(
        ConfigError, match=r"settings \(data sha256:[0-9a-f]{16} → sha256:[0-9a-f]{16}\)"
    ):
        _replica(moved, out).restore()


@pytest.mark.case(CASE)
def test_a_checkpoint_of_an_older_distrain_resumes_with_a_note_of_what_was_not_checked(
    mnist_examples, tmp_path
):
    from distrain.base.errors import ConfigError

    out = tmp_path / "run"
    first = _replica(mnist_examples, out)
    older = {k: v for k, v in first.fingerprint.items() if k != "settings"}
    first.fingerprint_var.assign(json.dumps(older))
    first.version.assign(5)
    first.checkpoint(5)
    again = _replica(mnist_examples, out, learning_rate=0.01)
    assert again.restore().endswith("ckpt-5") and again.step == 5
    (note,) = again.notes
    assert "does not record optimizer, learning_rate," in note and "older distrain" in note
    # What it records is still checked.
    with pytest.raises(ConfigError, match="model: 'softmax' in the checkpoint, 'mlp' now"):
        _replica(mnist_examples, out, model="mlp").restore()


def _train(data, out, *flags, check=True):
    command = [sys.executable, "-m", "distrain", "train", "--data", str(data)]
    command += ["--output", str(out), "--model", "softmax", "--batch-size", "64"]
    command += ["--checkpoint-every-steps", "5", *flags]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if check:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _history(out: Path) -> dict:
    return json.loads((out / "history.json").read_text())


@pytest.mark.slow
@pytest.mark.case(CASE)
def test_refused_resume_then_restart_then_plain_resume(mnist_examples, tmp_path):
    out = tmp_path / "run"
    _train(mnist_examples, out, "--epochs", "1")
    per_epoch = _history(out)["steps"]
    # Another learning rate: refused before any training, in one line, exit 2.
    proc = _train(mnist_examples, out, "--epochs", "2", "--learning-rate", "0.01", check=False)
    assert proc.returncode == 2, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert "learning_rate 0.001 → 0.01" in last and f"ckpt-{per_epoch}" in last, last
    assert "resumed from" not in proc.stdout and "epoch 1/2" not in proc.stdout
    assert _history(out)["steps"] == per_epoch  # nothing written
    # --restart: from step 0, the old checkpoints and history set aside, and said so.
    proc = _train(mnist_examples, out, "--epochs", "2", "--learning-rate", "0.01", "--restart")
    assert "restart: set aside" in proc.stdout and "learning_rate 0.001 → 0.01" in proc.stdout
    history = _history(out)
    restarted = history["restarted"]
    assert restarted["from_step"] == per_epoch
    assert restarted["differences"] == ["learning_rate 0.001 → 0.01"]
    assert restarted["set_aside"] == str(out / "checkpoints.before-restart")
    assert (out / "checkpoints.before-restart" / f"ckpt-{per_epoch}.index").exists()
    assert json.loads((out / "history.before-restart.json").read_text())["steps"] == per_epoch
    assert history["resumed_at_steps"] == [] and history["steps"] == 2 * per_epoch
    assert [e["epoch"] for e in history["epochs"]] == [1, 2]
    # The same settings again, one epoch more: a plain resume, which keeps the record.
    _train(mnist_examples, out, "--epochs", "3", "--learning-rate", "0.01")
    history = _history(out)
    assert history["resumed_at_steps"] == [2 * per_epoch] and history["steps"] == 3 * per_epoch
    assert history["restarted"] == restarted and "resume_notes" not in history


@pytest.mark.case(CASE)
def test_a_rank_with_its_own_seed_checks_the_runs_settings(mnist_examples, tmp_path):
    import dataclasses

    from distrain.base.errors import ConfigError
    from distrain.train.config import TrainConfig
    from distrain.train.replica import Replica

    # avg:N:init=independent: rank r builds its replica from seed + 7919 r, and resumes
    # from rank 0's checkpoint of the run's settings.
    out = tmp_path / "run"
    _checkpointed(mnist_examples, out)
    cfg = TrainConfig(data_dir=str(mnist_examples), output_dir=str(out), model="softmax")
    rank_1 = dataclasses.replace(cfg, seed=7919)
    assert Replica(rank_1, run_cfg=cfg).restore().endswith("ckpt-5")
    with pytest.raises(ConfigError, match="seed 0 → 7919"):
        Replica(rank_1).restore()
