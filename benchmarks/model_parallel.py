"""Section 9 of the suite: the models under single, data-parallel and model-parallel runs.

For each model: time per epoch and peak memory per rank of ``single:1``, ``sync:2``,
``tensor:2`` and ``pipeline:2:micro=M`` (where the model can be split that way), and the
cost model's predicted step time of each split beside the measured one:

* **tensor** (seed 000, §2.3, as distrain does it): a step is the replicated layers' time,
  the split dense layers' time over N, and per split dense layer an allgather of its
  output (N-1 messages of B*out/N floats) and, when layers with weights come before it,
  an allreduce of its input's gradient (2(N-1) messages of B*in/N floats), each message
  costing T_lat + bytes/B on the link the suite measured in section 4. Beside it, seed
  000's own count for one epoch of example-at-a-time messages: eqs. (4)-(9), K messages
  and N1 + N2 + N3 data.
* **pipeline** (GPipe): the costliest stage's share of the step, stretched by the bubble
  (M+N-1)/M, and every transfer: distrain chains a stage's transfers in the schedule's
  order, so each micro-batch's activations forward and gradient back, at each of the N-1
  boundaries, is a message on the step's path (2M(N-1) of them).

The step time of one process on one core (``single:1`` pinned to a core) is the compute
both predictions start from; shares of it go by multiply-adds per layer
(:func:`distrain.train.modes.pipeline.layer_costs`).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

FLOAT = 4  # bytes


def _is_rank(command: list[str]) -> bool:
    """Whether a command line is a rank's or a worker's: ``python -m distrain worker``.

    Not mpirun, nor a child caught between fork and exec.
    """
    return command[1:4] == ["-m", "distrain", "worker"]


def dense_layers(model) -> list[dict]:
    """Each split layer's inputs and units, and whether layers with weights come before it.

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
                    "positions": int(math.prod(d or 1 for d in layer.output_shape[1:-1])),
                }
            )
        elif isinstance(layer, recurrent):
            shape = (
                layer.input_shape[0] if isinstance(layer.input_shape, list) else layer.input_shape
            )
            out.append(
                {
                    "in": int(layer.cell.kernel.shape[0]) + int(layer.units),  # input and state
                    "out": int(layer.units),
                    "after": True,  # the state before it always has weights
                    "steps": int(shape[1] or 1),
                }
            )
        weighted = weighted or bool(layer.trainable_weights)
    return out


def dense_share(model) -> float:
    """The dense layers' share of a step's multiply-adds."""
    import tf_keras as keras

    from distrain.train.modes.pipeline import layer_costs

    split = (keras.layers.Dense, keras.layers.LSTM, keras.layers.SimpleRNN)
    costs = layer_costs(model)
    dense = sum(c for c, layer in zip(costs, model.layers, strict=True) if isinstance(layer, split))
    return dense / sum(costs)


def tensor_step(t1: float, model, batch: int, n: int, bandwidth: float, latency: float) -> dict:
    """Predicted step seconds of ``tensor:n``, and its communication part."""
    f = dense_share(model)
    comm = 0.0
    for layer in dense_layers(model):
        rows = batch * layer.get("positions", 1)
        once = (n - 1) * (latency + rows * layer["out"] * FLOAT / n / bandwidth)
        if layer["after"]:
            once += 2 * (n - 1) * (latency + rows * layer["in"] * FLOAT / n / bandwidth)
        comm += once * layer.get("steps", 1)  # a recurrent layer's collectives, step by step
    return {"step": t1 * (1 - f) + t1 * f / n + comm, "comm": comm, "dense_share": f}


def pipeline_step(
    t1: float, model, batch: int, n: int, micro: int, bandwidth: float, latency: float
) -> dict:
    """Predicted step seconds of ``pipeline:n:micro=M``: costliest stage, bubble, transfers."""
    import numpy as np

    from distrain.train.modes.pipeline import layer_costs, stage_bounds

    costs = layer_costs(model)
    bounds = stage_bounds(costs, n)
    shares = [sum(costs[a:b]) / sum(costs) for a, b in bounds]
    bubble = (micro + n - 1) / micro
    comm = 0.0
    for _, b in bounds[:-1]:
        size = batch / micro * float(np.prod(model.layers[b - 1].output_shape[1:])) * FLOAT
        comm += 2 * micro * (latency + size / bandwidth)  # forward and back, each micro-batch
    return {
        "step": t1 * max(shares) * bubble + comm,
        "comm": comm,
        "bubble": bubble,
        "stage_shares": shares,
    }


def seed000_epoch(model, examples: int, f: int, bandwidth: float, latency: float) -> dict:
    """Seed 000's communication cost of one epoch, eqs. (4)-(9), for the dense layers.

    None for a model with recurrent layers, which the equations do not cover.

    b_0 is the first dense layer's inputs, b_1..b_{n-2} the hidden layers' units, b_{n-1}
    the outputs; messages go one example at a time.
    """
    every = dense_layers(model)
    if any("steps" in layer for layer in every):
        return None  # the equations are for feed-forward nets: no count for recurrent ones
    layers = every
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


def bench_models(cfg, tmp: Path, link: tuple[float, float], log) -> dict:
    """Runs every model of :data:`cfg.model_setups` in single, sync, tensor and pipeline."""
    from benchmarks.suite import _sample
    from distrain.datasets import load_info
    from distrain.memory import PeakProcessMemory
    from distrain.steps import preprocess
    from distrain.train.config import ConfigError, TrainConfig
    from distrain.train.driver import steady
    from distrain.train.launch import run_training
    from distrain.train.models import build_model

    bandwidth, latency = link
    rows = []
    micro = cfg.model_micro
    for dataset, model_name in cfg.model_setups:
        size = dict(cfg.model_sizes).get(dataset, cfg.model_size)
        data = tmp / f"models-{dataset}-{size}"
        if not data.exists():
            preprocess(dataset, _sample(tmp, dataset, size), data)
        info = load_info(str(data), model_name)
        model = build_model(info, model_name, 0)
        runs = {}
        for run, cores in (
            ("single:1", "1 core"),
            ("single:1", "all cores"),
            ("sync:2", "all cores"),
            ("tensor:2", "all cores"),
            (f"pipeline:2:micro={micro}", "all cores"),
        ):
            key = f"{run} ({cores})" if run == "single:1" else run
            try:
                tc = TrainConfig(
                    data_dir=str(data),
                    output_dir=str(tmp / f"m-{dataset}-{model_name}-{len(runs)}"),
                    run=run,
                    model=model_name,
                    epochs=cfg.model_epochs,
                    batch_size=cfg.model_batch,
                    checkpoint_every_steps=0,
                    validation_freq=cfg.model_epochs,
                    threads_per_worker=1 if cores == "1 core" else 0,
                )
            except ConfigError as err:
                runs[key] = {"refused": str(err)}
                continue
            allowed = os.sched_getaffinity(0)
            if cores == "1 core":
                os.sched_setaffinity(0, {min(allowed)})
            try:
                with PeakProcessMemory(_is_rank) as memory:
                    history = run_training(tc)
            finally:
                os.sched_setaffinity(0, allowed)
            epochs = steady(history["epochs"])
            per_epoch = sum(e["step_seconds"] for e in epochs) / len(epochs)
            steps = history["steps"] / len(history["epochs"])
            runs[key] = {
                "epoch_seconds": per_epoch,
                "step_seconds": per_epoch / steps,
                "val_accuracy": history["epochs"][-1]["val_accuracy"],
                "peak_memory_per_rank": memory.per_process(),
                "parameters_per_rank": history.get("parameters_per_rank"),
            }
            log(f"  {dataset}/{model_name} {key}: {per_epoch:.2f} s/epoch")
        t1 = runs["single:1 (1 core)"]["step_seconds"]
        pipe = f"pipeline:2:micro={micro}"
        predictions = {  # a split the model refuses gets no prediction
            "tensor:2": tensor_step(t1, model, cfg.model_batch, 2, bandwidth, latency)
            if "refused" not in runs["tensor:2"]
            else None,
            pipe: pipeline_step(t1, model, cfg.model_batch, 2, micro, bandwidth, latency)
            if "refused" not in runs[pipe]
            else None,
        }
        examples = info.splits["train"]
        rows.append(
            {
                "dataset": dataset,
                "model": model_name,
                "size": size,
                "examples": examples,
                "parameters": int(sum(v.shape.num_elements() for v in model.trainable_variables)),
                "runs": runs,
                "predicted": predictions,
                "seed000": seed000_epoch(model, examples, 2, bandwidth, latency),
            }
        )
    return {
        "rows": rows,
        "batch": cfg.model_batch,
        "micro": micro,
        "epochs": cfg.model_epochs,
        "size": cfg.model_size,
        "link": {"bytes_per_second": bandwidth, "latency_seconds": latency},
    }


def render_models(section: dict) -> list[str]:
    """Section 9 of BENCHMARKS.md."""

    def mb(values):
        return "/".join(f"{v / 2**20:,.0f}" for v in values) if values else "—"

    micro = section["micro"]
    pipe = f"pipeline:2:micro={micro}"
    lines = [
        "## 9. Models under data and model parallelism",
        "",
        "Each model on a generated sample (its training examples in the first column), batch "
        f"{section['batch']}, {section['epochs']} epochs (the first left out as warm-up): "
        "seconds per epoch and each rank's peak resident memory (MB, rank by rank). "
        "`single:1 (1 core)` is pinned to one core: the compute the predictions start "
        "from. Predicted step times use the link fitted in section 4 "
        f"({section['link']['bytes_per_second'] / 1e9:.2f} GB/s, "
        f"{section['link']['latency_seconds'] * 1e6:.0f} µs a message).",
        "",
        "| model | params | single:1 s/epoch | sync:2 | tensor:2 | "
        f"{pipe} | MB/rank single | sync:2 | tensor:2 | pipeline |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in section["rows"]:
        runs = row["runs"]

        def cell(key, runs=runs):
            r = runs.get(key) or {}
            return f"{r['epoch_seconds']:.2f}" if "epoch_seconds" in r else "refused"

        def memory(key, runs=runs):
            return mb((runs.get(key) or {}).get("peak_memory_per_rank"))

        lines.append(
            f"| {row['dataset']}/{row['model']} ({row.get('examples', section['size']):,}) | "
            f"{row['parameters']:,} | {cell('single:1 (all cores)')} | {cell('sync:2')} | "
            f"{cell('tensor:2')} | "
            f"{cell(pipe)} | {memory('single:1 (all cores)')} | {memory('sync:2')} | "
            f"{memory('tensor:2')} | {memory(pipe)} |"
        )
    lines += [
        "",
        "Step time, predicted by the cost model and measured (ms), and seed 000's own "
        "count of one epoch's messages (eqs. 4-9, example at a time) on the same link:",
        "",
        "| model | 1 core | tensor:2 predicted | measured | error | "
        f"{pipe} predicted | measured | error | seed 000: K | N (bytes) | s/epoch |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in section["rows"]:
        runs, pred, seed = row["runs"], row["predicted"], row["seed000"]
        t1 = runs["single:1 (1 core)"]["step_seconds"]

        def pair(key, runs=runs, pred=pred):
            measured = (runs.get(key) or {}).get("step_seconds")
            if pred.get(key) is None or measured is None:
                return "— | refused | —"
            p = pred[key]["step"]
            return f"{p * 1e3:.1f} | {measured * 1e3:.1f} | {p / measured - 1:+.0%}"

        counted = (
            f"{seed['K']:,.0f} | {seed['N']:,.0f} | {seed['seconds']:.2f}" if seed else "— | — | —"
        )
        lines.append(
            f"| {row['dataset']}/{row['model']} | {t1 * 1e3:.1f} | {pair('tensor:2')} | "
            f"{pair(pipe)} | {counted} |"
        )
    lines.append("")
    return lines
