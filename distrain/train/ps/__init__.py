"""The parameter-server engine: every worker drives its own steps, as between-graph replication.

Each process of a parameter-server run (chief, workers, parameter servers) runs a
``tf.compat.v1.train.Server`` named by ``TF_CONFIG``. The chief and every worker build the
same graph: the model's and the optimizer's variables are placed on the parameter servers
by ``replica_device_setter``, so they are shared by name, and each worker adds its own
input pipeline and training step. A worker runs its steps in its own session against the
parameter servers; nothing on a step's path goes through the chief.

What a step does with its gradient is the mode's rule (:class:`PushRule`): async applies
it at once, syncreplicas accumulates it on the parameter servers and drops it if stale.
Either way the step is granted an update number only once its gradient is on the
servers, and only up to a limit, which makes the count of updates exact:

* ``version`` counts the updates granted so far, ``applied`` those whose variables are
  written; ``limit`` is the update the workers may go up to. The chief raises ``limit``
  to the next checkpoint and waits until ``applied`` reaches it: then no worker is
  writing, and the chief writes a consistent checkpoint numbered by applied updates. At
  an epoch end without a checkpoint the workers go on while the chief reads the epoch's
  counters and evaluates. The chief sleeps on a wake-up queue that the awaited update
  fills (:meth:`PSGraph.count_applied`), with a look at the counters every quarter second.
* Per worker, the parameter servers keep the steps it finished, the loss and correct
  counts per epoch (by the update each step was granted), and a histogram of its
  gradients' staleness; the chief reads them and samples the step counts for the
  progress plots.

The chief never waits on one worker: a dead or stopped worker simply stops adding steps,
the others reach the limit. Only when no update at all comes for a minute does the run
fail, saying so.

Its modules, one concern each (each imports only those listed before it):

* :mod:`~distrain.train.ps.roles`: a process's role in the cluster (``TF_CONFIG``), the
  local cluster's addresses, and its TensorFlow server.
* :mod:`~distrain.train.ps.transport`: how gradients and parameters travel between
  processes (packed one tensor per server).
* :mod:`~distrain.train.ps.state`: the writes of a step's forward pass to non-trainable
  variables (batch norm's moving statistics), applied by the rules with the gradient.
* :mod:`~distrain.train.ps.graph`: the shared graph: variables, counters, the lock.
* :mod:`~distrain.train.ps.rules`: :class:`~distrain.train.ps.rules.PushRule`, what a
  step does with its gradient (each mode's rule is in its module).
* :mod:`~distrain.train.ps.mirror`: a worker's copy of a dense model.
* :mod:`~distrain.train.ps.worker_loop`: a worker's loop.
* :mod:`~distrain.train.ps.chief`: the chief, and its engine for the epoch driver.
* :mod:`~distrain.train.ps.mode`: what every parameter-server mode shares (its
  processes, Kubernetes objects, and the role each process plays).
"""
