"""[ps] A worker's copy of a dense model, refreshed from the parameter servers every step."""

from __future__ import annotations

from distrain.base.errors import TrainingError
from distrain.train.ps.graph import PSGraph
from distrain.train.ps.transport import by_server, moved_as_one


class Mirror:
    """[ps] A worker's copy of a dense model, refreshed at the start of every step.

    The worker's step reads the shared variables of each parameter server as one tensor
    (:func:`moved_as_one`, after the version is read) and writes them into its copy,
    whose variables the step then differentiates: one request per server instead of one
    per variable. The values are those a step reading
    the shared variables directly would see; only a model whose every variable is
    trainable and gets a dense gradient is mirrored (an embedding's rows are read on
    the server, only those looked up).

    Built in the worker's graph, under its device.

    Args:
        g: The shared graph.
        read_version: The version read before the parameters.
    """

    def __init__(self, g: PSGraph, read_version):
        tf = g.tf
        self.model = g.build_model()
        self.variables = self.model.trainable_variables
        if len(self.variables) != len(g.variables):
            raise TrainingError("a worker's copy of the model differs from the shared one")
        writes = []
        for device, group in by_server(g.variables):
            shared = [g.variables[i] for i in group]
            with tf.control_dependencies([read_version]):
                values = moved_as_one(shared, [v.shape for v in shared], from_device=device)
            writes += [self.variables[i].assign(v) for i, v in zip(group, values, strict=True)]
        #: Op: the copy holds the shared values (run before every step's reads).
        self.refresh = tf.group(writes)
        self.init = tf.group([v.initializer for v in self.model.variables])

    @staticmethod
    def fits(model, grads) -> bool:
        """Whether a model whose step computes ``grads`` can be mirrored."""
        from tensorflow import IndexedSlices

        dense = not any(isinstance(grad, IndexedSlices) for grad in grads)
        return dense and len(model.variables) == len(model.trainable_variables)
