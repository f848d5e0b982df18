"""Tensor (column) parallelism: a model's dense layers split by columns over Horovod ranks.

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


def gather_columns(y, group: ModelGroup, sizes: list[int]):
    """[tensor] The group's columns side by side; backward, this process's columns only."""
    import tensorflow as tf

    start = sum(sizes[: group.rank])
    mine = sizes[group.rank]

    @tf.custom_gradient
    def gather(y):
        moved, back = _last_first(y)
        whole = tf.transpose(group.hvd.allgather(moved, **group.collectives), back)

        def grad(dy):
            return dy[..., start : start + mine]

        return whole, grad

    return gather(y)


def _keras():
    import tf_keras

    return tf_keras


class ColumnDense(_keras().layers.Layer):
    """One process's columns of a dense layer; outputs the whole layer's output.

    Built from the unsplit layer (already built), whose columns it copies: a split model
    starts from exactly the unsplit model's weights.

    Args:
        dense: The unsplit ``Dense`` layer.
        group: The model group.
    """

    def __init__(self, dense, group: ModelGroup, **kwargs):
        super().__init__(name=f"{dense.name}_columns", **kwargs)
        self.group = group
        self.units = dense.units
        self.sizes = column_sizes(dense.units, group.size)
        self.activation = dense.activation
        start = sum(self.sizes[: group.rank])
        stop = start + self.sizes[group.rank]
        kernel = dense.kernel.numpy()[:, start:stop]
        self.kernel = self.add_weight(
            name="kernel", shape=kernel.shape, initializer=_constant(kernel)
        )
        self.bias = None
        if dense.use_bias:
            bias = dense.bias.numpy()[start:stop]
            self.bias = self.add_weight(name="bias", shape=bias.shape, initializer=_constant(bias))

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


def _constant(value: np.ndarray):
    keras = _keras()
    return keras.initializers.Constant(np.array(value, dtype=np.float32))


def unsplittable(model) -> list[str]:
    """The layers of ``model`` that a column split cannot handle (empty: it can be split)."""
    keras = _keras()
    refused = (keras.layers.LSTM, keras.layers.GRU, keras.layers.SimpleRNN)
    return [layer.name for layer in model.layers if isinstance(layer, refused)]


def split_model(model, group: ModelGroup):
    """``model`` (a built ``Sequential``) with every ``Dense`` layer split by columns.

    The other layers are kept as they are (the same objects): they run whole on every
    process of the group.

    Raises:
        ValueError: A layer that cannot be split (a recurrent one).
    """
    keras = _keras()
    refused = unsplittable(model)
    if refused:
        raise ValueError(
            f"{model.name}: no column split for recurrent layers ({', '.join(refused)})"
        )
    layers = [
        ColumnDense(layer, group) if isinstance(layer, keras.layers.Dense) else layer
        for layer in model.layers
    ]
    inputs = keras.layers.Input(shape=model.input_shape[1:], dtype=model.inputs[0].dtype)
    return keras.Sequential([inputs, *layers], name=f"{model.name}_tensor{group.size}")


def whole_weights(split, group: ModelGroup) -> list[np.ndarray]:
    """The unsplit model's weights, in its order, from the group's columns (a collective).

    Every process of the group must call it: the columns are allgathered.
    """
    import tensorflow as tf

    hvd = group.hvd
    out = []
    for layer in split.layers:
        if isinstance(layer, ColumnDense):
            for weight in [layer.kernel, *([layer.bias] if layer.bias is not None else [])]:
                moved, back = _last_first(tf.convert_to_tensor(weight))
                whole = hvd.allgather(moved, name=f"whole_{weight.name}", **group.collectives)
                out.append(tf.transpose(whole, back).numpy())
        else:
            out.extend(w.numpy() for w in layer.weights)
    return out


def parameters(model) -> int:
    """Trainable parameters this process holds."""
    return int(sum(np.prod(v.shape) for v in model.trainable_variables))
