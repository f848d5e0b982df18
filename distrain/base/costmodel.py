"""The cost model: step times of data, tensor and pipeline parallelism from one core's step.

Seed 000's model of communication (``../shared/papers/000_79ab81518f612185.txt``, eq. 4):
a step's messages cost ``T_comm = K (T_lat + N T_data)``, K messages of N bytes each on a
link of latency ``T_lat`` and ``1 / T_data`` bytes per second. Compute starts from the
measured step time of one process on one core, ``t1``, and shares of it go by multiply-adds
per layer (:func:`layer_costs`).

* **sync** (ring allreduce): ``K = 2(N-1)`` messages of ``S/N`` bytes per step, S the
  gradients' bytes (:func:`ring_step`).
* **async** (parameter servers): ``K = 2P`` messages of ``S/P`` bytes per worker step, the
  servers' links capping the cluster (:func:`ps_throughput`).
* **tensor** (seed 000, section 2.3, as distrain splits): the replicated layers' time, the
  split layers' time over N, and per split layer an allgather of its output and, when
  layers with weights come before it, an allreduce of its input's gradient
  (:func:`tensor_step`).
* **pipeline** (GPipe): the costliest stage stretched by the bubble, and every
  micro-batch's transfers at every stage boundary (:func:`pipeline_step`).

A model enters as its :func:`profile` (plain numbers, JSON), so that a report can predict
from what a run recorded without building the model again. Workers that share cores run
slower by :func:`contention`.
"""

from __future__ import annotations

import math

import numpy as np

FLOAT = 4  # bytes of a float32


def _shape(layer, which: str):
    """A layer's ``output_shape`` or ``input_shape`` (the first of a list), or None if unknown.

    tf-keras records a layer's shapes when it is called on Keras tensors (a functional or
    ``Sequential`` model); a layer of a subclassed model is called inside the model's
    ``call`` and has none. Then a dense layer's output is ``(None, units)``, its weights'
    (as over one position), and any other layer's shapes are unknown.
    """
    try:
        shape = getattr(layer, which)
    except (AttributeError, RuntimeError):
        units = getattr(layer, "units", None)
        dense = which == "output_shape" and isinstance(units, int) and layer.weights
        return (None, units) if dense else None
    return shape[0] if isinstance(shape, list) else shape  # a layer that returns states


def layer_costs(model) -> list[float]:
    """Multiply-adds per example of each layer of a built ``Sequential`` (its stage weight).

    Dense, convolution and recurrent layers count their multiply-adds; the others
    (reshaping, pooling, activations) a thousandth of their output size, so that they
    weigh little but a stage of them alone is not free. (Other models' layers too, for the
    cost model of the benchmark suite.)
    """
    import tf_keras as keras

    recurrent = (keras.layers.LSTM, keras.layers.SimpleRNN, keras.layers.GRU)
    costs = []
    for layer in model.layers:
        shape = _shape(layer, "output_shape")
        if shape is None:  # a subclassed model's layer: a thousandth of its weights
            costs.append(layer.count_params() * 1e-3)
            continue
        out = [d or 1 for d in shape[1:]]
        if isinstance(layer, keras.layers.Dense):
            costs.append(float(np.prod(out)) * layer.kernel.shape[0])
        elif isinstance(layer, recurrent):
            kernel, inputs = layer.cell.kernel, _shape(layer, "input_shape")
            steps = (inputs[1] if inputs else None) or 1
            # Each step: the input and the previous state times every gate's columns.
            costs.append(float(steps) * (kernel.shape[0] + layer.units) * kernel.shape[1])
        elif isinstance(layer, keras.layers.Conv2DTranspose):
            kh, kw, filters, _ = layer.kernel.shape
            costs.append(float(np.prod(layer.input_shape[1:])) * kh * kw * filters)
        elif isinstance(layer, keras.layers.Conv2D):
            kh, kw, cin, _ = layer.kernel.shape
            costs.append(float(np.prod(out)) * kh * kw * cin)
        else:
            costs.append(float(np.prod(out)) * 1e-3)
    return costs


def stage_bounds(costs: list[float], stages: int) -> list[tuple[int, int]]:
    """Cuts layers ``0..L-1`` into ``stages`` consecutive non-empty runs, the costliest cheapest.

    Returns:
        ``(start, stop)`` of each stage.

    Raises:
        ValueError: Fewer layers than stages.
    """
    n = len(costs)
    if n < stages:
        raise ValueError(f"{n} layers cannot make {stages} pipeline stages")
    prefix = np.concatenate([[0.0], np.cumsum(costs)])
    # best[k][i]: the least possible costliest stage when the first i layers make k stages.
    best = np.full((stages + 1, n + 1), np.inf)
    cut = np.zeros((stages + 1, n + 1), dtype=int)
    best[0][0] = 0.0
    for k in range(1, stages + 1):
        for i in range(k, n + 1):
            for j in range(k - 1, i):
                worst = max(best[k - 1][j], prefix[i] - prefix[j])
                if worst < best[k][i]:
                    best[k][i], cut[k][i] = worst, j
    bounds, i = [], n
    for k in range(stages, 0, -1):
        bounds.append((int(cut[k][i]), int(i)))
        i = int(cut[k][i])
    return bounds[::-1]


def dense_layers(model) -> list[dict]:
    """Each layer the column split covers: inputs, units, and whether weights come before.

    Dense layers, and recurrent ones (``steps``: their time steps, each a matrix product
    of the input and the previous state with ``gates`` x units columns, split like a
    dense layer's: an allgather of the state forward at every step).
    """
    import tf_keras as keras

    recurrent = (keras.layers.LSTM, keras.layers.SimpleRNN, keras.layers.GRU)
    out, weighted = [], False
    for layer in model.layers:
        if isinstance(layer, keras.layers.Dense):
            out.append(
                {
                    "in": int(layer.kernel.shape[0]),
                    "out": int(layer.units),
                    "after": weighted,
                    # Rows per example: a dense layer over a sequence acts at every position.
                    "positions": int(
                        math.prod(d or 1 for d in _shape(layer, "output_shape")[1:-1])
                    ),
                }
            )
        elif isinstance(layer, recurrent):
            shape = _shape(layer, "input_shape")
            out.append(
                {
                    "in": int(layer.cell.kernel.shape[0]) + int(layer.units),  # input and state
                    "out": int(layer.units),
                    "after": True,  # the state before it always has weights
                    "steps": int((shape[1] if shape else None) or 1),
                }
            )
        weighted = weighted or bool(layer.trainable_weights)
    return out


def profile(model) -> dict:
    """What the cost model needs of a built model, as plain numbers.

    Returns:
        ``parameters`` (trainable), ``layer_costs`` (multiply-adds per example, layer by
        layer), ``output_sizes`` (numbers each layer outputs per example), ``split_layers``
        (:func:`dense_layers`) and ``dense_share`` (the split layers' share of the
        multiply-adds).
    """
    import tf_keras as keras

    costs = layer_costs(model)
    split = (keras.layers.Dense, keras.layers.LSTM, keras.layers.SimpleRNN)
    dense = sum(c for c, layer in zip(costs, model.layers, strict=True) if isinstance(layer, split))
    sizes = []
    for layer in model.layers:
        shape = _shape(layer, "output_shape")
        sizes.append(float(math.prod(d or 1 for d in shape[1:])) if shape else 0.0)
    return {
        "parameters": int(sum(v.shape.num_elements() for v in model.trainable_variables)),
        "layer_costs": [float(c) for c in costs],
        "output_sizes": sizes,
        "split_layers": dense_layers(model),
        "dense_share": dense / sum(costs),
    }


def contention(workers: int, threads: int, cores: int | None) -> float:
    """How much slower each worker computes when ``workers`` x ``threads`` share ``cores``.

    1 while every thread has a core of its own (or the cores are unknown: one machine per
    worker); beyond, the cores are shared evenly.
    """
    if not cores:
        return 1.0
    return max(1.0, workers * max(threads, 1) / cores)


def ring_step(t_comp: float, size: float, n: int, bandwidth: float, latency: float) -> float:
    """Step time of sync data parallelism: compute, then a ring allreduce of ``size`` bytes.

    The ring sends K = 2(N-1) messages of S/N bytes each per step (reduce-scatter, then
    all-gather): T_comm = K (T_lat + (S/N) T_data) with T_data = 1/B.
    """
    if n == 1:
        return t_comp
    return t_comp + 2 * (n - 1) * (latency + size / n / bandwidth)


def ps_throughput(
    t_comp: float, size: float, n: int, p: int, bandwidth: float, latency: float, batch: int
) -> float:
    """Examples/second of async parameter-server training with N workers and P servers.

    Each worker step pushes its gradient and pulls the parameters, S bytes each way split
    over P servers, one after the other: K = 2P messages of S/P bytes, T_comm = K (T_lat +
    (S/P) T_data). The servers' links carry S in and S out per step of every worker, both
    at once on a full-duplex link: at most P B / S steps/second. (Counting 2S on each link,
    as this model once did, predicted half the servers' rate: the simulated-network
    benchmark, ``benchmarks/netsim.py``, measured 168 ms a step for 2 workers and a server
    at 100 Mb/s against the 301 ms that predicted.)
    """
    step = t_comp + 2 * p * (latency + size / p / bandwidth)
    return min(n * batch / step, p * bandwidth / size * batch)


def fit_link(allreduce: dict) -> tuple[float, float]:
    """Bandwidth and per-message latency that best explain measured allreduce times.

    Least squares of t(S) = 2(N-1) T_lat + 2(N-1)/N S / B over the measured sizes: the
    effective link as Horovod sees it (its negotiation cycle and copies included).

    Args:
        allreduce: ``{"ranks": N, "rows": [{"bytes", "seconds"}, ...]}``, at least two sizes.

    Raises:
        ValueError: Fewer than two sizes, or fewer than two ranks.
    """
    n = int(allreduce["ranks"])
    sizes = np.array([r["bytes"] for r in allreduce["rows"]], float)
    if n < 2 or len(set(sizes.tolist())) < 2:
        raise ValueError("a link is fitted to allreduce times of two ranks or more, two sizes")
    times = np.array([r["seconds"] for r in allreduce["rows"]], float)
    design = np.stack([np.full_like(sizes, 2 * (n - 1)), 2 * (n - 1) / n * sizes], axis=1)
    (latency, inv_bw), *_ = np.linalg.lstsq(design, times, rcond=None)
    return 1.0 / max(inv_bw, 1e-15), max(latency, 0.0)


def tensor_step(
    t1: float, prof: dict, batch: int, n: int, bandwidth: float, latency: float
) -> dict:
    """Predicted step seconds of ``tensor:n`` on a model's :func:`profile`.

    Args:
        t1: One process's step on one core (times :func:`contention` when ranks share
            cores: the compute stretches, the messages do not).
        prof: The model's :func:`profile`.
        batch: Examples per step.
        n: Ranks the split layers are split over.
        bandwidth: Link bytes per second.
        latency: Link seconds per message.

    Returns:
        ``step`` seconds, its ``comm`` part and the model's ``dense_share``.
    """
    f = prof["dense_share"]
    comm = 0.0
    for layer in prof["split_layers"]:
        rows = batch * layer.get("positions", 1)
        once = (n - 1) * (latency + rows * layer["out"] * FLOAT / n / bandwidth)
        if layer["after"]:
            once += 2 * (n - 1) * (latency + rows * layer["in"] * FLOAT / n / bandwidth)
        comm += once * layer.get("steps", 1)  # a recurrent layer's collectives, step by step
    return {"step": t1 * (1 - f) + t1 * f / n + comm, "comm": comm, "dense_share": f}


def pipeline_step(
    t1: float, prof: dict, batch: int, n: int, micro: int, bandwidth: float, latency: float
) -> dict:
    """Predicted step seconds of ``pipeline:n:micro=M``: costliest stage, bubble, transfers."""
    costs = prof["layer_costs"]
    bounds = stage_bounds(costs, n)
    shares = [sum(costs[a:b]) / sum(costs) for a, b in bounds]
    bubble = (micro + n - 1) / micro
    comm = 0.0
    for _, b in bounds[:-1]:
        size = batch / micro * prof["output_sizes"][b - 1] * FLOAT
        comm += 2 * micro * (latency + size / bandwidth)  # forward and back, each micro-batch
    return {
        "step": t1 * max(shares) * bubble + comm,
        "comm": comm,
        "bubble": bubble,
        "stage_shares": shares,
    }


def seed000_epoch(prof: dict, examples: int, f: int, bandwidth: float, latency: float) -> dict:
    """Seed 000's communication cost of one epoch, eqs. (4)-(9), for the dense layers.

    None for a model with recurrent layers, which the equations do not cover.

    b_0 is the first dense layer's inputs, b_1..b_{n-2} the hidden layers' units, b_{n-1}
    the outputs; messages go one example at a time.
    """
    layers = prof["split_layers"]
    if any("steps" in layer for layer in layers):
        return None  # the equations are for feed-forward nets: no count for recurrent ones
    if not layers or f < 2:
        return {"K": 0, "N": 0.0, "seconds": 0.0}
    b = [layers[0]["in"], *[layer["out"] for layer in layers]]
    hidden = b[1:-1]
    log_f = math.log2(f)
    k = examples * ((f - 1) + len(hidden) * (f * log_f + 2 * (f - 1)))
    n1 = (f - 1) * (b[0] + b[-1] / f) * FLOAT
    n2 = sum(f * log_f * bi / f for bi in hidden) * FLOAT
    n3 = sum((f - 1) * b[i + 1] + (f - 1) * b[i] / f for i in range(1, len(b) - 1)) * FLOAT
    data = examples * (n1 + n2 + n3)  # eqs. (6)-(8) are per example
    return {"K": k, "N": data / k if k else 0.0, "seconds": k * latency + data / bandwidth}
