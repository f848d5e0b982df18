"""Tensor (column) parallelism: a model's dense and recurrent layers split over Horovod ranks.

Seed 000's model parallelism (§2.2-2.3): the output columns of every weight matrix are
shared out among the processes of a model group; each process computes its columns of a
layer's output from the whole input and the group gathers them, so that every process
holds the layer's whole output; backward, each process's share of the error reaching the
layer's input is summed over the group. Done SPMD, as Megatron-LM's column-parallel layer
does it: every process of a group reads the same batch and runs the layers that are not
split (convolutions, pooling, embeddings) whole, on the same values, so their gradients
agree without a collective.

Two operators carry the communication (Megatron's ``f`` and ``g``):

* :func:`to_group`: forward the identity; backward the sum of the input gradients over the
  group (each process's ``dy_r W_r^T`` is its share of ``dy W^T``).
* :func:`gather_columns`: forward an allgather of the columns; backward this process's
  columns of the output gradient, with no communication (every process holds the same
  whole gradient, because everything after the layer is replicated).

A recurrent layer (``LSTM``, ``SimpleRNN``) is split by its units: each process holds, for
its units, the columns of every gate in the input kernel, the recurrent kernel and the
bias. At every time step it computes its units' gates from the whole input and the whole
previous ``h``, and its units' cell and ``h``; the group gathers ``h`` (``g``), which the
next step, and the next layer, read whole; the previous ``h`` passes ``f`` before the
recurrent kernel, so that its gradient is summed over the group.

Every process's loss is the unsplit model's loss, and every gradient a column slice (or,
for replicated layers, the whole) of the unsplit model's, up to float rounding: the
exactness test checks both on two ranks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class ModelGroup:
    """The processes that hold one copy of the model between them, split by columns.

    Attributes:
        hvd: ``horovod.tensorflow``, initialised.
        rank: This process's place in the group (which columns it holds).
        size: Processes in the group.
        process_set: The group's Horovod process set (the global set when it is the world).
    """

    hvd: object
    rank: int
    size: int
    process_set: object = None

    @property
    def collectives(self) -> dict:
        """Keyword arguments that keep a Horovod collective inside the group."""
        ps = self.process_set
        return {"process_set": ps if ps is not None else self.hvd.global_process_set}


def column_sizes(units: int, parts: int) -> list[int]:
    """Columns per part, as even as they go (the first ``units % parts`` get one more)."""
    return [units // parts + (1 if i < units % parts else 0) for i in range(parts)]


def _last_first(tensor):
    """``tensor`` with its last axis moved to the front, and the permutation that undoes it."""
    import tensorflow as tf

    rank = tensor.shape.rank
    forward = [rank - 1, *range(rank - 1)]
    back = [*range(1, rank), 0]
    return tf.transpose(tensor, forward), back


def to_group(x, group: ModelGroup):
    """[tensor] Identity forward; backward, the input gradients summed over the group."""
    import tensorflow as tf

    @tf.custom_gradient
    def identity(x):
        def grad(dy):
            return group.hvd.allreduce(dy, op=group.hvd.Sum, **group.collectives)

        return tf.identity(x), grad

    return identity(x)


def own_columns(units: int, sizes: list[int], rank: int, gates: int = 1) -> np.ndarray:
    """The unsplit layer's columns that ``rank`` holds, in the order it holds them.

    A recurrent layer's kernels are ``gates`` blocks of ``units`` columns side by side
    (an LSTM's ``[i | f | c | o]``); a rank holds its units' columns of each block, so its
    kernel is ``[i_r | f_r | c_r | o_r]``.
    """
    start = sum(sizes[:rank])
    stop = start + sizes[rank]
    return np.concatenate([np.arange(g * units + start, g * units + stop) for g in range(gates)])


def gather_columns(y, group: ModelGroup, sizes: list[int]):
    """[tensor] The group's columns side by side; backward, this process's columns only."""
    import tensorflow as tf

    start = sum(sizes[: group.rank])
    mine = sizes[group.rank]

    @tf.custom_gradient
    def gather(y):
        moved, back = _last_first(y)
        whole = tf.transpose(group.hvd.allgather(moved, **group.collectives), back)
        # The allgather's first axis has no static size; a recurrent step's state needs it.
        whole.set_shape([*y.shape[:-1], sum(sizes)])

        def grad(dy):
            return dy[..., start : start + mine]

        return whole, grad

    return gather(y)


def _keras():
    import tf_keras

    return tf_keras


def _constant(value: np.ndarray):
    keras = _keras()
    return keras.initializers.Constant(np.array(value, dtype=np.float32))


class ColumnLayer(_keras().layers.Layer):
    """A layer split by output columns: this rank's share of an unsplit layer's weights.

    Args:
        layer: The unsplit layer (built), whose name the split one extends.
        group: The model group.
        units: The unsplit layer's units.
        gates: Blocks of ``units`` columns in its kernels (4 for an LSTM, else 1).
    """

    def __init__(self, layer, group: ModelGroup, units: int, gates: int = 1, **kwargs):
        super().__init__(name=f"{layer.name}_columns", **kwargs)
        self.group = group
        self.units = units
        self.gates = gates
        self.sizes = column_sizes(units, group.size)
        #: The unsplit kernels' columns this rank holds, in its own kernels' order.
        self.columns = own_columns(units, self.sizes, group.rank, gates)

    def _copy(self, name: str, whole: np.ndarray):
        """A weight holding this rank's columns of the unsplit ``whole``."""
        mine = whole[..., self.columns]
        return self.add_weight(name=name, shape=mine.shape, initializer=_constant(mine))

    def split_weights(self) -> list:
        """This rank's weights, in the unsplit layer's order of weights."""
        raise NotImplementedError


class ColumnDense(ColumnLayer):
    """One process's columns of a dense layer; outputs the whole layer's output.

    Built from the unsplit layer (already built), whose columns it copies: a split model
    starts from exactly the unsplit model's weights.

    Args:
        dense: The unsplit ``Dense`` layer.
        group: The model group.
    """

    def __init__(self, dense, group: ModelGroup, **kwargs):
        super().__init__(dense, group, dense.units, **kwargs)
        self.activation = dense.activation
        self.kernel = self._copy("kernel", dense.kernel.numpy())
        self.bias = self._copy("bias", dense.bias.numpy()) if dense.use_bias else None

    def split_weights(self) -> list:
        return [self.kernel, *([self.bias] if self.bias is not None else [])]

    def call(self, x):
        import tensorflow as tf

        x = to_group(x, self.group)  # [tensor] backward: the group's input gradients summed
        if x.shape.rank == 2:
            y = tf.matmul(x, self.kernel)
        else:
            y = tf.tensordot(x, self.kernel, [[x.shape.rank - 1], [0]])
        if self.bias is not None:
            y = y + self.bias
        y = gather_columns(y, self.group, self.sizes)  # [tensor] the whole output on each
        return self.activation(y)

    def compute_output_shape(self, input_shape):
        return (*input_shape[:-1], self.units)


class ColumnRecurrent(ColumnLayer):
    """One process's units of a recurrent layer; outputs the whole layer's output and states.

    The same interface as the unsplit layer: the input, the output, the initial states
    (``initial_state``, or ``[inputs, *states]`` as Keras passes them in a functional
    model) and the returned states (``return_state``) are whole; the layer's own
    columns stay inside. The inputs' projection by the kernel is computed for every step
    at once, before the loop; the steps run in Keras's ``backend.rnn``, a
    ``tf.while_loop`` (unrolled only when the unsplit layer was). Each step's allgather
    (and, backward, its allreduce) is the same op of the loop's body on every rank, which
    Horovod matches by its name; a step's collective takes the previous step's result, so
    the ranks run them in the same order, one at a time.

    Args:
        layer: The unsplit layer (built): ``LSTM`` or ``SimpleRNN``.
        group: The model group.
    """

    #: Blocks of columns in the kernels (a subclass's gates).
    gates = 1

    def __init__(self, layer, group: ModelGroup, **kwargs):
        problem = _unsupported(layer)
        if problem:
            raise ValueError(f"{layer.name}: no column split for {problem}")
        cell = layer.cell
        super().__init__(layer, group, cell.units, self.gates, **kwargs)
        self.return_sequences = layer.return_sequences
        self.return_state = layer.return_state
        self.go_backwards = layer.go_backwards
        self.unroll = layer.unroll
        self.zero_output_for_mask = layer.zero_output_for_mask
        self.activation = cell.activation
        self.supports_masking = True
        self.kernel = self._copy("kernel", cell.kernel.numpy())
        self.recurrent_kernel = self._copy("recurrent_kernel", cell.recurrent_kernel.numpy())
        self.bias = self._copy("bias", cell.bias.numpy()) if cell.use_bias else None

    def split_weights(self) -> list:
        return [self.kernel, self.recurrent_kernel, *([self.bias] if self.bias is not None else [])]

    def initial_states(self, inputs, given: list | None) -> list:
        """The loop's states: the whole ``h`` first, then the states of this rank's units."""
        raise NotImplementedError

    def cell_step(self, z, carried: list):
        """This rank's units' ``h`` and carried states, from their gates' sums ``z``."""
        raise NotImplementedError

    def whole_states(self, states: list) -> list:
        """The layer's returned states, whole, from the loop's last states."""
        return states[:1]

    def _mine(self, whole):
        """[tensor] This rank's units of a whole state; backward, summed over the group."""
        start = sum(self.sizes[: self.group.rank])
        return to_group(whole, self.group)[:, start : start + self.sizes[self.group.rank]]

    def call(self, inputs, mask=None, training=None, initial_state=None):
        import tensorflow as tf

        keras = _keras()
        if isinstance(inputs, list | tuple):  # a functional model passes [inputs, *states]
            inputs, *given = inputs
            initial_state = initial_state or given or None
        if isinstance(mask, list | tuple):
            mask = mask[0]
        x = to_group(inputs, self.group)  # [tensor] backward: the group's dx shares summed
        z = tf.tensordot(x, self.kernel, [[2], [0]])
        if self.bias is not None:
            z = z + self.bias

        def step(z_t, states):
            h = to_group(states[0], self.group)  # [tensor] backward: dh's shares summed
            mine, carried = self.cell_step(z_t + tf.matmul(h, self.recurrent_kernel), states[1:])
            h = gather_columns(mine, self.group, self.sizes)  # [tensor] the whole h on each
            return h, [h, *carried]

        last, outputs, states = keras.backend.rnn(
            step,
            z,
            self.initial_states(inputs, initial_state),
            go_backwards=self.go_backwards,
            mask=mask,
            unroll=self.unroll,
            input_length=z.shape[1],
            zero_output_for_mask=self.zero_output_for_mask,
            return_all_outputs=self.return_sequences,
        )
        output = outputs if self.return_sequences else last
        if self.return_state:
            return [output, *self.whole_states(states)]
        return output

    def compute_mask(self, inputs, mask=None):
        if isinstance(mask, list | tuple):
            mask = mask[0]
        output = mask if self.return_sequences else None
        if self.return_state:
            return [output, *[None] * self.states]
        return output

    #: States of the unsplit layer (h, and c for an LSTM).
    states = 1

    def _zeros(self, inputs, width: int):
        import tensorflow as tf

        return tf.zeros([tf.shape(inputs)[0], width], dtype=self.compute_dtype)


class ColumnSimpleRNN(ColumnRecurrent):
    """One process's units of a ``SimpleRNN``: ``h = act(x W + h U + b)`` of its columns."""

    def initial_states(self, inputs, given):
        return [given[0] if given else self._zeros(inputs, self.units)]

    def cell_step(self, z, carried):
        return self.activation(z), []


class ColumnLSTM(ColumnRecurrent):
    """One process's units of an ``LSTM``: its units' gates (i, f, c, o), cell and ``h``.

    The cell state ``c`` of its units stays on the rank; a state given or returned whole is
    cut to them on the way in and gathered on the way out.
    """

    gates = 4
    states = 2

    def __init__(self, layer, group: ModelGroup, **kwargs):
        super().__init__(layer, group, **kwargs)
        self.recurrent_activation = layer.cell.recurrent_activation

    def initial_states(self, inputs, given):
        if not given:
            mine = self.sizes[self.group.rank]
            return [self._zeros(inputs, self.units), self._zeros(inputs, mine)]
        h, c = given
        return [h, self._mine(c)]

    def cell_step(self, z, carried):
        import tensorflow as tf

        (c,) = carried
        i, f, g, o = tf.split(z, 4, axis=-1)
        act, gate = self.activation, self.recurrent_activation
        c = gate(f) * c + gate(i) * act(g)
        return gate(o) * act(c), [c]

    def whole_states(self, states):
        h, c = states
        return [h, gather_columns(c, self.group, self.sizes)]  # [tensor] the whole c


def _unsupported(layer) -> str | None:
    """Why the column split cannot take a recurrent ``layer`` (None: it can)."""
    keras = _keras()
    if type(layer) not in (keras.layers.LSTM, keras.layers.SimpleRNN):
        return f"{type(layer).__name__} layers (only Dense, LSTM and SimpleRNN are split)"
    cell = layer.cell
    if cell.dropout or cell.recurrent_dropout:
        return "dropout (each rank would drop other units)"
    if layer.stateful or layer.time_major:
        return "stateful or time-major layers"
    return None


_SPLIT_LAYERS = {"Dense": ColumnDense, "LSTM": ColumnLSTM, "SimpleRNN": ColumnSimpleRNN}


def _split_layer(layer, group: ModelGroup):
    """The split layer for ``layer``, or ``layer`` itself (run whole on every rank)."""
    keras = _keras()
    for name, split in _SPLIT_LAYERS.items():
        if type(layer) is getattr(keras.layers, name):
            return split(layer, group)
    return layer


def unsplittable(model) -> list[str]:
    """The layers of ``model`` that a column split cannot handle, each with why.

    Recurrent layers other than ``LSTM`` and ``SimpleRNN`` (``GRU``, wrappers such as
    ``Bidirectional``), and those with dropout or state kept across batches; a subclassed
    model (its own ``call``), named whole. Empty: the model can be split.
    """
    keras = _keras()
    if not isinstance(model, keras.Sequential) and not model._is_graph_network:  # noqa: SLF001
        return [
            f"{model.name} ({type(model).__name__}): a subclassed model, whose own call a "
            "column split cannot rewrite"
        ]
    refused = []
    for layer in model.layers:
        if isinstance(layer, keras.layers.RNN | keras.layers.Bidirectional):
            problem = _unsupported(layer)
            if problem:
                refused.append(f"{layer.name}: {problem}")
    return refused


def split_model(model, group: ModelGroup):
    """``model`` (built, ``Sequential`` or functional) with its dense and recurrent layers split.

    ``Dense``, ``LSTM`` and ``SimpleRNN`` layers become :class:`ColumnDense`,
    :class:`ColumnLSTM` and :class:`ColumnSimpleRNN`. The other layers are kept as they
    are (the same objects): they run whole on every process of the group.

    Raises:
        ValueError: A layer that cannot be split (a GRU, or an LSTM with dropout).
    """
    keras = _keras()
    refused = unsplittable(model)
    if refused:
        raise ValueError(f"{model.name}: no column split for {'; '.join(refused)}")
    name = f"{model.name}_tensor{group.size}"
    if isinstance(model, keras.Sequential):
        layers = [_split_layer(layer, group) for layer in model.layers]
        inputs = keras.layers.Input(shape=model.input_shape[1:], dtype=model.inputs[0].dtype)
        return keras.Sequential([inputs, *layers], name=name)
    clone = keras.models.clone_model(model, clone_function=lambda layer: _split_layer(layer, group))
    return keras.Model(clone.inputs, clone.outputs, name=name)


def whole_weights(split, group: ModelGroup) -> list[np.ndarray]:
    """The unsplit model's weights, in its order, from the group's columns (a collective).

    Every process of the group must call it: the columns are allgathered, and put back in
    the unsplit layer's order (an LSTM's gates hold each rank's units in turn).
    """
    import tensorflow as tf

    hvd = group.hvd
    out = []
    for layer in split.layers:
        if not isinstance(layer, ColumnLayer):
            out.extend(w.numpy() for w in layer.weights)
            continue
        # Column k of the gathered weight is the unsplit layer's column order[k].
        order = np.concatenate(
            [own_columns(layer.units, layer.sizes, r, layer.gates) for r in range(group.size)]
        )
        for weight in layer.split_weights():
            moved, back = _last_first(tf.convert_to_tensor(weight))
            gathered = hvd.allgather(moved, name=f"whole_{weight.name}", **group.collectives)
            gathered = tf.transpose(gathered, back).numpy()
            whole = np.empty_like(gathered)
            whole[..., order] = gathered
            out.append(whole)
    return out


def parameters(model) -> int:
    """Trainable parameters this process holds."""
    return int(sum(np.prod(v.shape) for v in model.trainable_variables))
