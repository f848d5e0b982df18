"""The cost model (:mod:`distrain.base.costmodel`): known inputs in, the equations' values out."""

import pytest

from distrain.base.costmodel import (
    contention,
    fit_link,
    pipeline_step,
    profile,
    ps_throughput,
    ring_step,
    seed000_epoch,
    tensor_step,
)


def test_ring_allreduce_cost_model():
    # N = 1: no communication. N = 4: K = 2(N-1) = 6 messages of S/N bytes.
    assert ring_step(0.1, 8e6, 1, 1e9, 1e-5) == 0.1
    assert ring_step(0.1, 8e6, 4, 1e9, 1e-5) == pytest.approx(0.1 + 6 * (1e-5 + 2e6 / 1e9))
    # More workers on the same link: longer steps, never shorter.
    steps = [ring_step(0.05, 1e8, n, 1.25e9, 2e-5) for n in (2, 4, 8, 16)]
    assert steps == sorted(steps)


def test_parameter_server_cost_model_saturates_the_servers():
    # Small model: compute-bound, throughput grows with workers.
    small = [ps_throughput(0.1, 1e5, n, 1, 1e9, 1e-5, 100) for n in (1, 2, 4)]
    assert small[1] == pytest.approx(2 * small[0])
    # Big model: the servers' full-duplex links (S in and S out per worker step) cap it
    # at P B / S steps/second.
    cap = 1 * 1e9 / 1e9 * 100
    assert ps_throughput(0.001, 1e9, 64, 1, 1e9, 1e-5, 100) == pytest.approx(cap)
    assert ps_throughput(0.001, 1e9, 64, 4, 1e9, 1e-5, 100) == pytest.approx(4 * cap)


def test_link_fitted_to_allreduce_times():
    # 2 ranks, 1 ms per message, 1 GB/s: t = 2e-3 + S / 1e9.
    rows = [{"bytes": s, "seconds": 2e-3 + s / 1e9} for s in (4, 4096, 2**20, 2**24)]
    bandwidth, latency = fit_link({"ranks": 2, "rows": rows})
    assert bandwidth == pytest.approx(1e9, rel=1e-6)
    assert latency == pytest.approx(1e-3, rel=1e-6)


def test_link_needs_two_sizes_and_two_ranks():
    with pytest.raises(ValueError, match="two sizes"):
        fit_link({"ranks": 2, "rows": [{"bytes": 4, "seconds": 1e-3}] * 3})
    with pytest.raises(ValueError, match="two ranks"):
        fit_link({"ranks": 1, "rows": [{"bytes": 4, "seconds": 1e-3}, {"bytes": 8, "seconds": 1}]})


def test_workers_sharing_cores_compute_slower():
    assert contention(2, 1, 2) == 1.0
    assert contention(1, 1, 2) == 1.0
    assert contention(4, 1, 2) == 2.0
    assert contention(2, 2, 2) == 2.0
    assert contention(8, 1, None) == 1.0  # cores unknown: a machine per worker


def _dense_net():
    import tf_keras as keras

    return keras.Sequential(
        [keras.layers.Input((8,)), keras.layers.Dense(6), keras.layers.Dense(4)]
    )


def test_profile_of_a_dense_net():
    prof = profile(_dense_net())
    assert prof["parameters"] == 8 * 6 + 6 + 6 * 4 + 4
    assert prof["layer_costs"] == [48.0, 24.0]  # multiply-adds per example
    assert prof["output_sizes"] == [6.0, 4.0]
    assert prof["split_layers"] == [
        {"in": 8, "out": 6, "after": False, "positions": 1},
        {"in": 6, "out": 4, "after": True, "positions": 1},
    ]
    assert prof["dense_share"] == 1.0


def test_tensor_step_adds_each_split_layers_collectives():
    prof = {
        "dense_share": 0.5,
        "split_layers": [
            {"in": 8, "out": 6, "after": False},  # its output allgathered only
            {"in": 6, "out": 4, "after": True},  # and its input's gradient allreduced
        ],
    }
    lat, bw, batch = 1e-3, 1e6, 10
    first = lat + batch * 6 * 4 / 2 / bw
    second = (lat + batch * 4 * 4 / 2 / bw) + 2 * (lat + batch * 6 * 4 / 2 / bw)
    got = tensor_step(0.1, prof, batch, 2, bw, lat)
    assert got["comm"] == pytest.approx(first + second)
    assert got["step"] == pytest.approx(0.1 * 0.5 + 0.1 * 0.5 / 2 + first + second)
    # A recurrent layer's collectives come at every time step.
    rnn = {"dense_share": 1.0, "split_layers": [{"in": 6, "out": 4, "after": True, "steps": 5}]}
    assert tensor_step(0.1, rnn, batch, 2, bw, lat)["comm"] == pytest.approx(5 * second)


def test_pipeline_step_is_the_costliest_stage_stretched_by_the_bubble():
    prof = {"layer_costs": [2.0, 2.0], "output_sizes": [3.0, 1.0]}
    lat, bw = 1e-3, 1e6
    got = pipeline_step(0.1, prof, 8, 2, 4, bw, lat)
    assert got["stage_shares"] == [0.5, 0.5]
    assert got["bubble"] == pytest.approx(5 / 4)
    # One boundary; each of 4 micro-batches sends 8/4 x 3 floats forward and back.
    assert got["comm"] == pytest.approx(2 * 4 * (lat + 2 * 3 * 4 / bw))
    assert got["step"] == pytest.approx(0.1 * 0.5 * 5 / 4 + got["comm"])


def test_seed000_counts_example_at_a_time_messages():
    # 784-480-160-10 on f = 2 machines, one example: eq. (4)'s K and (6)-(8)'s data.
    layers = [
        {"in": 784, "out": 480, "after": False},
        {"in": 480, "out": 160, "after": True},
        {"in": 160, "out": 10, "after": True},
    ]
    got = seed000_epoch({"split_layers": layers}, 1, 2, 1e9, 1e-5)
    assert got["K"] == 1 + 2 * (2 + 2)
    n1 = (2 - 1) * (784 + 10 / 2)  # eq. (6)
    n2 = 2 * 1 * (480 / 2) + 2 * 1 * (160 / 2)  # eq. (7): F log2 F S(b_i / F)
    n3 = (160 + 480 / 2) + (10 + 160 / 2)  # eq. (8): (F-1) S(d^(i+1)) + (F-1) S(d^i / F)
    data = (n1 + n2 + n3) * 4
    assert got["N"] * got["K"] == pytest.approx(data)
    recurrent = [{"in": 10, "out": 4, "after": True, "steps": 3}]
    assert seed000_epoch({"split_layers": recurrent}, 1, 2, 1e9, 1e-5) is None
