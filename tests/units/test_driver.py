"""The epoch driver's bookkeeping, with a fake replica and steps: no TensorFlow, no cluster.

Also the plugin contract: a mode is one registered class, and nothing outside
``distrain/train/modes`` (and the parameter-server engine it shares) names a mode.
"""

from __future__ import annotations

import re

import pytest

from distrain.base.errors import ConfigError
from distrain.train.config import RunSpec, TrainConfig
from distrain.train.driver import (
    EpochDriver,
    next_checkpoint,
    next_stop,
    resume_point,
    steady_throughput,
    step_spread,
)
from tests.conftest import ROOT


def test_segments_stop_at_checkpoints_and_epoch_ends():
    # 10 updates an epoch, a checkpoint every 4 global updates.
    assert next_stop(0, 0, 10, 4) == 4
    assert next_stop(0, 8, 10, 4) == 10  # the epoch ends before update 12
    assert next_stop(1, 0, 10, 4) == 2  # global 10 -> the checkpoint at 12
    assert next_stop(1, 2, 10, 4) == 6
    assert next_stop(3, 5, 10, 0) == 10  # epoch ends only


def test_the_next_checkpoint_follows_both_cadences():
    # 10 updates an epoch, 4 epochs, every 4 updates and every 2nd epoch end.
    assert next_checkpoint(1, 10, 4, 4, 2) == 4
    assert next_checkpoint(9, 10, 4, 4, 2) == 12  # 10 is an epoch end without one
    assert next_checkpoint(13, 10, 4, 4, 2) == 16
    assert next_checkpoint(17, 10, 4, 4, 2) == 20  # the 2nd epoch's end
    assert next_checkpoint(5, 10, 4, 0, 1) == 10  # epoch ends only
    assert next_checkpoint(11, 10, 4, 0, 3) == 30
    assert next_checkpoint(31, 10, 4, 0, 3) == 40  # the end of training
    assert next_checkpoint(20, 10, 4, 0, 2) == 20


def test_resume_point_from_a_checkpoint():
    assert resume_point(0, 0, 10, 3, "ckpt") == (0, 0)
    assert resume_point(14, 1, 10, 3, "ckpt") == (1, 4)  # mid-epoch 2
    assert resume_point(30, 3, 10, 3, "ckpt") == (3, 0)  # done
    with pytest.raises(ConfigError, match="does not fit epochs of 10 updates") as err:
        resume_point(25, 1, 10, 3, "ckpt")  # written with another batch size
    # A retry would find the same checkpoint: the error is permanent, not retried.
    from distrain.preprocess.failures import classify

    assert classify(err.value) is False


def test_throughput_leaves_out_the_first_epoch():
    epochs = [
        {"examples": 100, "step_seconds": 10.0},
        {"examples": 300, "step_seconds": 1.0},
        {"examples": 500, "step_seconds": 1.0},
    ]
    assert steady_throughput(epochs) == pytest.approx(400 / 2.0)
    assert steady_throughput(epochs[:1]) == pytest.approx(10.0)
    assert steady_throughput([]) == 0.0
    spread = step_spread([0.001] * 9 + [0.010])
    assert spread["count"] == 10 and spread["median"] == pytest.approx(1.0)


class FakeReplica:
    """What the driver needs of a replica, in plain Python."""

    def __init__(self, tmp_path, info_train=100, restored=(0, 0)):
        self.out = tmp_path
        self.rank = 0
        self.labels_per_example = 1
        self.step, self.epoch = restored
        self.info = type("Info", (), {"splits": {"train": info_train}, "dataset": "fake"})()
        self.checkpoints: list[int] = []
        self.saved = False

    def restore(self):
        return "ckpt-x" if self.step else None

    def log(self, message):
        pass

    def set_epoch(self, epoch):
        self.epoch = epoch

    def evaluate(self):
        self.evaluations = getattr(self, "evaluations", 0) + 1
        return 0.5, 0.9

    def checkpoint(self, step, engine=None):
        self.checkpoints.append(step)

    def save_model(self):
        self.saved = True


class FakeSteps:
    """Each update: 2 batches, loss 1.0 and 3 correct per batch."""

    gradients_per_update = 2

    def __init__(self, replica, per_epoch=5):
        self.replica, self.per_epoch = replica, per_epoch
        self.calls: list[tuple[int, int, int]] = []
        self.refreshes: list[tuple[int, int]] = []

    def updates_per_epoch(self):
        return self.per_epoch

    def start(self):
        pass

    def run(self, epoch, position, stop):
        self.calls.append((epoch, position, stop))
        n = stop - position
        self.replica.step += n
        return 2.0 * n, 6.0 * n, [0.01] * n

    def epoch_seconds(self, measured):
        return measured

    def epoch_totals(self, loss_sum, correct, seen):
        return loss_sum, correct, seen

    def refresh(self):
        # Only what reads the weights asks for them: evaluation, a checkpoint, the model.
        self.refreshes.append((self.replica.step, len(self.replica.checkpoints)))

    def epoch_note(self):
        return ""

    def history(self):
        return {"mode_field": True}

    def finish(self):
        pass


def config(tmp_path, **kw):
    settings = {"epochs": 3, "batch_size": 4, "checkpoint_every_steps": 3, **kw}
    return TrainConfig(data_dir=str(tmp_path), output_dir=str(tmp_path), **settings)


def test_the_driver_runs_segments_checkpoints_and_records(tmp_path):
    replica = FakeReplica(tmp_path)
    engine = FakeSteps(replica)
    history = EpochDriver(config(tmp_path), replica, engine).run()
    # Segments end at every third global update and at each epoch's end (5 updates).
    assert engine.calls[:3] == [(0, 0, 3), (0, 3, 5), (1, 0, 1)]
    assert sum(stop - start for _, start, stop in engine.calls) == 15
    # Mid-epoch checkpoints at 3, 6, 9, 12 (not 15: an epoch end has its own), then ends.
    assert replica.checkpoints == [3, 5, 6, 9, 10, 12, 15]
    assert history["steps"] == 15 and history["mode_field"]
    assert [e["examples"] for e in history["epochs"]] == [40, 80, 120]  # updates x 2 x 4
    assert history["epochs"][0]["loss"] == pytest.approx(2.0 * 5 / 40)
    assert history["epochs"][0]["accuracy"] == pytest.approx(6.0 * 5 / 40)
    assert history["global_batch_size"] == 8
    assert history["step_ms"]["count"] == 10  # the epochs after the first
    assert replica.saved and (tmp_path / "history.json").exists()


@pytest.mark.parametrize(
    "shares, expected",
    [
        (None, [2.0 / 20, 8.0 / 20]),  # equal shares: each saw 20 labels
        ([0.25, 0.75], [2.0 / 10, 8.0 / 30]),  # a parameter-server run's uneven workers
        ([1.0, 0.0], None),  # a worker that counted nothing: no loss of its own
    ],
)
def test_each_ranks_loss_is_over_its_own_share_of_the_labels(tmp_path, shares, expected):
    class Ranked(FakeSteps):
        def epoch_totals(self, loss_sum, correct, seen):
            self.rank_loss_sums = [2.0, 8.0]
            if shares is not None:
                self.rank_shares = shares
            return 10.0, correct, seen

    replica = FakeReplica(tmp_path)
    history = EpochDriver(config(tmp_path, epochs=1), replica, Ranked(replica)).run()
    epoch = history["epochs"][0]  # 5 updates x 2 batches x 4 = 40 labels
    assert epoch["loss"] == pytest.approx(10.0 / 40)
    if expected is None:
        assert "rank_loss" not in epoch
    else:
        assert epoch["rank_loss"] == pytest.approx(expected)


def test_validation_every_other_epoch_and_after_the_last(tmp_path):
    replica = FakeReplica(tmp_path)
    engine = FakeSteps(replica)
    cfg = config(tmp_path, validation_freq=2, checkpoint_every_steps=0)
    history = EpochDriver(cfg, replica, engine).run()
    assert [e["val_accuracy"] for e in history["epochs"]] == [None, 0.9, 0.9]
    assert replica.evaluations == 2
    # The weights are brought up to date for the evaluations (after updates 10 and 15)
    # and the saved model, not at epoch 1's end; the fake replica's checkpoints do not
    # ask the engine, a real one does (Replica.checkpoint).
    assert [step for step, _ in engine.refreshes] == [10, 15, 15]


def test_the_driver_resumes_mid_epoch_and_ends_at_the_same_step(tmp_path):
    replica = FakeReplica(tmp_path, restored=(7, 1))  # 2 updates into epoch 2
    engine = FakeSteps(replica)
    history = EpochDriver(config(tmp_path), replica, engine).run()
    assert engine.calls[0] == (1, 2, 4)  # from position 2 to the checkpoint at 9
    assert history["steps"] == 15
    assert history["resumed_at_steps"] == [7]


# ---- the plugin contract ------------------------------------------------------------------


def test_a_new_mode_is_one_registered_class(tmp_path):
    from distrain.train import modes

    @modes.register
    class Toy(modes.Mode):
        name = "toy"
        options = {"k": "steps between exchanges"}

        @classmethod
        def check(cls, workers, options):
            checked = super().check(workers, options)
            return {**checked, "k": cls.integer(options, "k", 4)}

        def gradients_per_update(self):
            return self.spec.workers

    try:
        spec = RunSpec.parse("toy:3")
        assert spec.option("k") == 4 and str(spec) == "toy:3:k=4"
        cfg = TrainConfig(data_dir="d", output_dir=str(tmp_path), run="toy:3:k=2")
        assert cfg.effective_learning_rate == pytest.approx(3 * cfg.learning_rate)
        assert TrainConfig.from_json(cfg.to_json()).run == cfg.run
        with pytest.raises(ConfigError, match="toy mode has no option 'ps'"):
            RunSpec.parse("toy:2:ps=1")
    finally:
        modes._REGISTRY.pop("toy")


def test_threads_that_ask_for_a_mode_at_once_all_find_it(monkeypatch):
    """The built-in modes load once, and a thread asking meanwhile waits for all of them."""
    import sys
    import threading
    import time

    from distrain.train import modes

    modes.mode_names()  # every built-in mode imported once, for real
    built_in = list(modes._REGISTRY.values())

    def slow_import(name):  # a first import, slow: its modes register themselves
        time.sleep(0.02)
        for cls in built_in:
            if cls.__module__ == name:
                modes.register(cls)
        return sys.modules[name]

    monkeypatch.setattr(modes, "_REGISTRY", {})
    monkeypatch.setattr(modes, "_LOADED", False)
    monkeypatch.setattr(modes.importlib, "import_module", slow_import)
    found, errors = [], []

    def ask():
        try:
            found.append(modes.mode_class("sync").name)
        except ConfigError as err:
            errors.append(str(err))

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and found == ["sync"] * 4


def test_nothing_outside_the_modes_branches_on_a_mode_name():
    from distrain.train.modes import mode_names

    names = "|".join(re.escape(n) for n in mode_names())
    pattern = re.compile(rf"""(==|!=|\bin)\s*\(?\s*["']({names})["']""")
    allowed = {ROOT / "distrain" / "train" / "modes"}
    offenders = []
    for path in [*(ROOT / "distrain").rglob("*.py"), *(ROOT / "components").rglob("*.py")]:
        if any(parent in allowed for parent in path.parents):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_no_import_cycle_in_distrain_train():
    """Every import counts, inside functions too (not those only for type checking).

    Over ``distrain/train`` (modes, both engines, launch, config) with the cost model,
    the shared errors and the Kubernetes objects the engines build.
    """
    import ast

    paths = [
        *(ROOT / "distrain" / "train").rglob("*.py"),
        *(ROOT / "distrain" / "k8s").rglob("*.py"),
        ROOT / "distrain" / "base" / "costmodel.py",
        ROOT / "distrain" / "base" / "errors.py",
    ]
    modules = {
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
        for p in paths
    }
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text())
        typing_only = {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for statement in node.body
            for inner in ast.walk(statement)
        }
        deps = set()
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            deps.update(name for name in names if name in modules and name != module)
        graph[module] = deps

    def visit(module, trail):
        if module in trail:
            raise AssertionError(" -> ".join([*trail[trail.index(module) :], module]))
        for dep in sorted(graph.get(module, ())):
            visit(dep, [*trail, module])

    for module in graph:
        visit(module, [])


def test_every_mode_names_an_engine_and_inherits_no_other_mode():
    """Modes choose an engine (one process, Horovod, parameter servers), not a parent mode."""
    from distrain.train.engine import Engine
    from distrain.train.horovod import Horovod
    from distrain.train.modes import mode_class, mode_names
    from distrain.train.ps.mode import ParameterServers

    registered = {mode_class(name) for name in mode_names()}
    for name in mode_names():
        cls = mode_class(name)
        assert isinstance(cls.engine, Engine), name
        inherited = [base.name for base in cls.__mro__[1:] if base in registered]
        assert not inherited, f"{name} inherits {inherited}"
    assert isinstance(mode_class("tensor").engine, Horovod)
    assert isinstance(mode_class("async").engine, ParameterServers)
    assert type(mode_class("single").engine) is Engine


def test_sync_epoch_totals_sum_the_ranks_sums_but_not_the_examples_seen():
    from distrain.train.modes.single import LocalSteps

    class TwoRanks:
        """Two ranks with the same sums: Group.sums over them doubles each value."""

        size = 2

        def sums(self, *values):
            return [2 * v for v in values]

        def gather(self, value):
            return [value, value + 1.0]  # the other rank's loss is one more

    replica = type("R", (), {"cfg": None, "group": TwoRanks()})()
    # The driver's count of examples is every rank's already (updates x ranks x batch).
    steps = LocalSteps(replica, None)
    assert steps.epoch_totals(3.0, 5.0, 640) == (6.0, 10.0, 640)
    assert steps.rank_loss_sums == [3.0, 4.0]  # each rank's own, for the history


@pytest.mark.case("train/watch-fails")
def test_a_hook_that_fails_is_told_once_and_the_run_goes_on(tmp_path):
    from distrain.train.hooks import Hook

    class Broken(Hook):
        calls = 0

        def on_epoch_end(self, driver, record, durations):
            Broken.calls += 1
            raise OSError("No space left on device")

    class Counting(Hook):
        ends = 0

        def on_epoch_end(self, driver, record, durations):
            Counting.ends += 1

    replica = FakeReplica(tmp_path)
    lines = []
    replica.log = lines.append
    history = EpochDriver(
        config(tmp_path), replica, FakeSteps(replica), [Broken(), Counting()]
    ).run()
    assert len(history["epochs"]) == 3 and replica.saved
    assert Broken.calls == 1 and Counting.ends == 3
    assert [line for line in lines if "stopped" in line] == [
        "Broken stopped: OSError: No space left on device"
    ]


def test_the_driver_calls_its_hooks_at_each_point(tmp_path):
    from distrain.train.hooks import Hook

    class Recorder(Hook):
        def __init__(self):
            self.points = []

        def on_train_begin(self, driver):
            self.points.append("begin")

        def on_segment_end(self, driver, step):
            self.points.append(step)

        def on_epoch_end(self, driver, record, durations):
            self.points.append(("epoch", record["epoch"], len(durations)))

        def on_train_end(self, driver, history):
            self.points.append(("end", history["steps"]))

    replica = FakeReplica(tmp_path)
    hook = Recorder()
    EpochDriver(config(tmp_path, epochs=2), replica, FakeSteps(replica), [hook]).run()
    assert hook.points == ["begin", 3, 5, ("epoch", 1, 5), 6, 9, 10, ("epoch", 2, 5), ("end", 10)]
