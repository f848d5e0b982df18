"""``pipeline``: consecutive layers as stages on N ranks, each batch in M micro-batches (GPipe)."""

from __future__ import annotations

import numpy as np

from distrain.base.costmodel import layer_costs, pipeline_step, stage_bounds
from distrain.base.errors import ConfigError
from distrain.learning.models import find_model
from distrain.train.driver import EpochDriver
from distrain.train.horovod import HOROVOD, keep_collectives_in_order, probe_link, start_horovod
from distrain.train.modes import Mode, register
from distrain.train.modes.tensor import (
    SplitReplica,
    SplitSteps,
    check_split_optimizer,
    split_columns,
)
from distrain.train.replica import Group


def chain_breaker(model) -> str:
    """The first layer that does not read just the one before it ('' when the layers chain).

    Stages cut a chain: each passes one tensor, its last layer's output, to the next.
    """
    import tf_keras as keras

    if isinstance(model, keras.Sequential):
        return ""
    if not model._is_graph_network:  # noqa: SLF001 (tf-keras's mark of a subclassed model)
        return model.name  # its own call orders its layers
    if len(model.inputs) != 1 or len(model.outputs) != 1:
        return f"{model.name} (inputs {len(model.inputs)}, outputs {len(model.outputs)})"
    before = None
    for layer in model.layers:
        if isinstance(layer, keras.layers.InputLayer):
            before = layer
            continue
        nodes = layer._inbound_nodes  # noqa: SLF001 (how tf-keras records a layer's inputs)
        inbound = nodes[0].inbound_layers if len(nodes) == 1 else None
        if before is None or inbound is not before:
            return layer.name
        before = layer
    return ""


def check_chain(cfg, model) -> None:
    """Refuses a model whose layers do not chain, naming the first layer that breaks it.

    Raises:
        ConfigError: One line naming the layer.
    """
    layer, why = stage_problem(model)
    if layer:
        raise ConfigError(f"{cfg.run.name}: layer {layer!r} of model {cfg.model!r} {why}")


def stage_problem(model) -> tuple[str, str]:
    """The layer that keeps ``model`` from being cut into stages, and why (``("", "")``: none).

    A subclassed model (its own ``call`` orders its layers), inputs given as a dict of
    features by name or more than one input (stages pass one tensor on), or a layer that
    does not read just the one before it.
    """
    import tf_keras as keras

    if isinstance(model, keras.Sequential):
        return "", ""
    if not model._is_graph_network:  # noqa: SLF001 (tf-keras's mark of a subclassed model)
        return model.name, (
            f"is a subclassed {type(model).__name__}: its own call orders its layers, which "
            "pipeline stages cannot cut (use a data-parallel mode for it)"
        )
    names = list(model.input_names)
    if len(names) > 1 or isinstance(model._nested_inputs, dict):  # noqa: SLF001
        return names[-1], (
            f"is an input of a dict of features by name ({', '.join(names)}); pipeline stages "
            "pass one tensor from stage to stage (use tensor for it)"
        )
    breaker = chain_breaker(model)
    if breaker:
        return breaker, (
            "does not read just the layer before it; pipeline stages cut a chain of layers "
            "(use tensor for it)"
        )
    return "", ""


def batch_statistics_layer(model) -> str:
    """The first layer that normalises by its batch's statistics ('' when there is none).

    A ``BatchNormalization`` (or a subclass) in a stage sees micro-batches: it would
    normalise each by the micro-batch's mean and variance and move its moving statistics
    once per micro-batch, so a step would not be the unsplit model's step on the batch.
    """
    import tf_keras as keras

    for layer in model.submodules:
        if isinstance(layer, keras.layers.BatchNormalization):
            return f"{layer.name} ({type(layer).__name__})"
    return ""


def check_batch_statistics(cfg, model) -> None:
    """Refuses a model with a batch-normalising layer, naming it.

    Raises:
        ConfigError: One line naming the layer.
    """
    layer = batch_statistics_layer(model)
    if layer:
        raise ConfigError(
            f"{cfg.run.name}: layer {layer} of model {cfg.model!r} normalises by its batch's "
            "statistics, which pipeline's micro-batches would change; use tensor or hybrid for it"
        )


class PipelineReplica(SplitReplica):
    """[pipeline] This rank's stage: consecutive layers of the model, and GPipe's schedule.

    A batch is cut into ``micro`` micro-batches. Forward, each stage runs every
    micro-batch through its layers and passes the activations to the next stage; the
    last stage computes the loss. Backward, the last stage sends each micro-batch's
    gradient with respect to its input to the stage before, which goes on from there;
    each stage sums its layers' gradients over the micro-batches and updates once per
    batch, so a step is the unsplit model's step on the whole batch. The transfers are
    Horovod broadcasts from the sending stage within the pair of neighbouring stages
    (Horovod has no send and receive): a receiving stage knows the shape to expect,
    because every stage reads the same batch. Everything is one traced graph per stage,
    so a stage computes its next micro-batch while the last one is on its way.

    Args:
        cfg: The run's configuration.
        model_group: The stages: rank ``s`` holds stage ``s``.
        micro: Micro-batches per batch.
        links: The Horovod process set of each pair of neighbouring stages.
    """

    parallelism = "pipeline"

    def __init__(self, cfg, model_group, micro: int, links: list):
        self.micro, self.links = micro, links
        super().__init__(cfg, Group(0, 1, None, world_rank=model_group.rank), model_group)

    def build_model(self, model):
        import tf_keras as keras

        check_chain(self.cfg, model)
        mg = self.model_group
        self.stage, self.stages = mg.rank, mg.size
        self.bounds = stage_bounds(layer_costs(model), self.stages)
        start, stop = self.bounds[self.stage]
        # The whole model's weight shapes, stage by stage: for gathering them to save.
        self.weight_shapes = [
            [tuple(w.shape) for layer in model.layers[a:b] for w in layer.weights]
            for a, b in self.bounds
        ]
        if start == 0:
            inputs = keras.layers.Input(shape=model.input_shape[1:], dtype=model.inputs[0].dtype)
        else:
            inputs = keras.layers.Input(shape=model.layers[start - 1].output_shape[1:])
        self.out_shape = model.layers[stop - 1].output_shape[1:]
        self._nothing = self.tf.Variable(0.0, trainable=False, name="pipeline_buffer_fill")
        return keras.Sequential(
            [inputs, *model.layers[start:stop]], name=f"{model.name}_stage{self.stage}"
        )

    # ---- transfers between neighbouring stages ---------------------------------------

    def _in_order(self, make):
        """The transfer ``make()`` builds, run after this stage's previous one.

        Every stage makes its transfers in the schedule's order (forward micro-batches
        in turn, then backward in reverse), the same order on both ends of each link:
        without the chain, a stage could start a receive whose sender is itself waiting
        on a transfer this stage has not begun, and Horovod would wait for ever.
        """
        tf = self.tf
        with tf.control_dependencies(self._chain[-1:]):
            out = make()
        self._chain.append(out)
        return out

    def _pass(self, tensor, name: str, to_next: bool):
        """[pipeline] Sends ``tensor`` to the next (or previous) stage."""
        hvd = self.model_group.hvd
        link = self.links[self.stage if to_next else self.stage - 1]
        return self._in_order(
            lambda: hvd.broadcast(tensor, root_rank=self.stage, name=name, process_set=link)
        )

    def _take(self, shape, name: str, from_previous: bool):
        """[pipeline] Receives a tensor of ``shape`` from the previous (or next) stage."""
        tf, hvd = self.tf, self.model_group.hvd
        source = self.stage - 1 if from_previous else self.stage + 1
        link = self.links[source if from_previous else self.stage]
        # The buffer is filled from a variable, not a constant: Horovod's ops are not
        # marked stateful, and TensorFlow folds a node whose inputs are all constants
        # when it instantiates the function, running the collective then, alone, where
        # it waits for ever (a deadlock seen with tf.zeros here).
        buffer = tf.fill(shape, self._nothing.read_value())
        return self._in_order(
            lambda: hvd.broadcast(buffer, root_rank=source, name=name, process_set=link)
        )

    def _in_shape(self, rows):
        return [rows, *self.model.input_shape[1:]]

    def _out_shape(self, rows):
        return [rows, *self.out_shape]

    # ---- the step ----------------------------------------------------------------------

    def gradients(self, x, y, reduce=None):

        tf, s, last = self.tf, self.stage, self.stage == self.stages - 1
        self._chain = []  # this step's transfers, in order
        variables = self.model.trainable_variables
        rows = tf.shape(x)[0] // self.micro
        xs, ys = tf.split(x, self.micro), tf.split(y, self.micro)
        labels = tf.cast(tf.size(y), tf.float32)
        sent, inputs, outputs = [], [], []
        for m in range(self.micro):  # [pipeline] forward, micro-batch by micro-batch
            if s == 0:
                inp = xs[m]
            else:
                inp = self._take(self._in_shape(rows), f"pipe_fwd_{s - 1}_{m}", True)
            out = self.model(inp, training=True)
            if not last:
                sent.append(self._pass(out, f"pipe_fwd_{s}_{m}", True))
            inputs.append(inp)
            outputs.append(out)
        grads = [tf.zeros_like(v) for v in variables]
        loss_sum = correct = tf.constant(0.0)
        for m in reversed(range(self.micro)):  # [pipeline] backward, last micro-batch first
            if last:
                micro_loss, micro_hits = self.task.sums(ys[m], outputs[m], training=True)
                target, seed = micro_loss / labels, None
                loss_sum += micro_loss
                correct += micro_hits
            else:
                shape = self._out_shape(rows)
                target, seed = outputs[m], self._take(shape, f"pipe_bwd_{s + 1}_{m}", False)
            wrt = [*variables, inputs[m]] if s > 0 else list(variables)
            got = tf.gradients(target, wrt, grad_ys=seed, gate_gradients=True)
            if s > 0:
                sent.append(self._pass(got[-1], f"pipe_bwd_{s}_{m}", False))
            grads = [total + g for total, g in zip(grads, got[: len(variables)], strict=True)]
        with tf.control_dependencies(sent):  # the transfers are part of the step
            grads = [tf.identity(g) for g in grads]
        return loss_sum, correct, grads

    # ---- evaluation and the whole model ---------------------------------------------

    def eval_function(self):
        if not hasattr(self, "_eval_step"):
            tf, s, last = self.tf, self.stage, self.stage == self.stages - 1

            @tf.function(input_signature=list(self.val_ds.element_spec))
            def eval_step(x, y):
                self._chain = []
                rows = tf.shape(x)[0]
                if s == 0:
                    inp = x
                else:
                    inp = self._take(self._in_shape(rows), f"pipe_eval_{s - 1}", True)
                out = self.model(inp, training=False)
                if not last:
                    with tf.control_dependencies([self._pass(out, f"pipe_eval_{s}", True)]):
                        return tf.constant(0.0), tf.constant(0.0)
                return self.task.sums(y, out)

            self._eval_step = eval_step
        return self._eval_step

    def from_last(self, *values: float) -> list[float]:
        """The last stage's values, on every stage (the loss is only computed there)."""
        tf, hvd = self.tf, self.model_group.hvd
        values = hvd.broadcast(
            tf.constant(values, tf.float64), root_rank=self.stages - 1, name="pipe_from_last"
        )
        return [float(v) for v in values.numpy()]

    def evaluate(self) -> tuple[float, float]:
        return tuple(self.from_last(*super().evaluate()))

    def whole_weights(self) -> list:
        tf, hvd = self.tf, self.model_group.hvd
        out = []
        for stage, shapes in enumerate(self.weight_shapes):
            mine = [w.numpy() for w in self.model.weights] if stage == self.stage else None
            for i, shape in enumerate(shapes):
                value = mine[i] if mine is not None else np.zeros(shape, np.float32)
                got = hvd.broadcast(tf.constant(value), root_rank=stage, name=f"whole_{stage}_{i}")
                out.append(got.numpy())
        return out


class PipelineSteps(SplitSteps):
    """[pipeline] The stages' steps; an epoch's loss and accuracy come from the last stage."""

    def epoch_totals(self, loss_sum, correct, seen):
        loss_sum, correct = self.replica.from_last(loss_sum, correct)
        return loss_sum, correct, seen


@register
class Pipeline(Mode):
    """Consecutive layers on N ranks as stages; micro-batches flow through them (GPipe)."""

    name = "pipeline"
    example = "pipeline:2"
    engine = HOROVOD  # [pipeline] Horovod's ranks, one per stage
    options = {"micro": "micro-batches per batch (default 4)"}
    carries_state = False  # [pipeline] a stage holds no whole recurrent layer's state

    @classmethod
    def check(cls, workers: int, options: dict) -> dict:
        checked = super().check(workers, options)
        micro = cls.integer(options, "micro", 4)
        if micro < 1:
            raise ConfigError(f"pipeline: micro must be at least 1, got {micro}")
        if workers < 2:
            raise ConfigError("pipeline: needs at least 2 stages (workers)")
        return {**checked, "micro": micro}

    def short_name(self) -> str:
        return f"{self.spec.mode}:{self.spec.workers}:micro={self.spec.option('micro')}"

    def predicted_step(self, t1, prof, batch, link):
        if not link:
            return None
        # [pipeline] the costliest stage, the bubble, each micro-batch's transfers
        b, lat = link["bytes_per_second"], link["latency_seconds"]
        n, micro = self.spec.workers, self.spec.option("micro")
        return pipeline_step(t1, prof, batch, n, micro, b, lat)["step"]

    def check_model(self, cfg, model) -> None:
        check_chain(cfg, model)
        check_batch_statistics(cfg, model)  # [pipeline] micro-batches are not the batch

    def check_optimizer(self, cfg, optimizer) -> None:
        check_split_optimizer(cfg, optimizer, columns=False)  # [pipeline] a stage each

    def check_config(self, cfg) -> None:
        micro = self.spec.option("micro")
        if cfg.batch_size % micro:
            raise ConfigError(
                f"{self.spec.name}: batch size {cfg.batch_size} does not divide into "
                f"{micro} micro-batches"
            )
        if not find_model(cfg.model).stages:
            raise ConfigError(
                f"{self.spec.name}: model {cfg.model!r} cannot be cut into stages (its inputs "
                "are sequences with masks or more than one tensor, which the stages do not "
                "pass on); use tensor for it"
            )

    def train(self, cfg) -> dict:
        import horovod.tensorflow as hvd

        from distrain.learning.split import ModelGroup  # its layers subclass tf_keras's

        keep_collectives_in_order()  # [pipeline] the transfers are ordered by control edges
        stages = cfg.run.workers
        # [pipeline] a process set for each pair of neighbouring stages (two stages: the world)
        pairs = [hvd.ProcessSet([s, s + 1]) for s in range(stages - 1)] if stages > 2 else []
        hvd, _ = start_horovod(cfg.idle_horovod_threads, process_sets=pairs, ranks=stages)
        link = probe_link(hvd)  # [pipeline] what a message costs on this run's link
        links = pairs or [hvd.global_process_set]
        group = ModelGroup(hvd, hvd.rank(), stages)
        replica = PipelineReplica(cfg, group, self.spec.option("micro"), links)
        history = EpochDriver(cfg, replica, PipelineSteps(replica, link=link)).run()
        hvd.join()
        return history

    @classmethod
    def columns(cls, run: dict, history: dict) -> dict:
        return {**cls.engine.columns(run, history), **split_columns(history)}
