"""``ssp``: stale-synchronous parallel: async updates, no worker more than S clocks ahead."""

from __future__ import annotations

import time

from distrain.base.errors import ConfigError
from distrain.train.modes import register
from distrain.train.modes.asynchronous import AsyncRule
from distrain.train.ps.graph import PSGraph
from distrain.train.ps.mode import ParameterServerMode
from distrain.train.ps.rules import PushRule

# Seconds between a waiting worker's looks at the clocks: the first wait, and the longest
# (each look is a call to the parameter server; a long wait need not cost a core).
POLL_SECONDS = (0.001, 0.02)
# Seconds without the slowest clock moving before a waiting worker counts the slowest
# worker as gone and leaves it out of the bound (a dead worker would stop every other);
# the spec's ``patience`` option.
PATIENCE_SECONDS = 20


class SSPRule(AsyncRule):
    """[ssp] Async's push, and a clock per worker that bounds how far ahead it may run.

    A worker's clock is its updates applied (its gradient on the variables). Before its
    next step a worker at clock ``c`` waits until every other worker's clock is at least
    ``c - staleness`` (Ho et al. 2013): ``staleness=0`` is bulk-synchronous (each step
    reads all the updates of the clock before), a very large one is async. The clock
    advances only after the update is written, so a worker that may go reads every
    update it has to.

    A worker whose clock has not moved for ``patience`` seconds while another waits for
    it is retired: left out of the bound, so that one dead worker does not stop the rest.

    Args:
        staleness: The bound S, in clocks.
        patience: Seconds a waiting worker gives the slowest before it retires it.
    """

    def __init__(self, staleness: int, patience: float = PATIENCE_SECONDS):
        self.staleness, self.patience = staleness, patience

    def create_variables(self, g: PSGraph) -> list:
        tf = g.tf
        workers = g.role.workers
        with tf.compat.v1.device("/job:ps/task:0"):

            def counter(name, dtype, value=0):
                return tf.Variable(tf.fill([workers], tf.cast(value, dtype)), name=name)

            self.clocks = counter("ssp_clocks", tf.int64)
            self.retired = counter("ssp_retired", tf.bool, False)
            # Per worker: seconds blocked, and the widest lead it started a step with.
            self.blocked = counter("ssp_blocked", tf.float64)
            self.widest = counter("ssp_widest", tf.int64)
            self.read_all = [self.clocks.read_value(), self.retired.read_value()]
            self.read_poll = [*self.read_all, g.stop.read_value()]
            self.read_waits = [self.blocked.read_value(), self.widest.read_value()]
            if g.role.job == "worker":
                me = tf.constant([g.role.index])
                self.seconds = tf.compat.v1.placeholder(tf.float64, [])
                self.lead = tf.compat.v1.placeholder(tf.int64, [])
                self.record_wait = tf.group(
                    self.blocked.scatter_add(tf.IndexedSlices(self.seconds[None], me)),
                    self.widest.scatter_max(tf.IndexedSlices(self.lead[None], me)),
                )
                self.slowest = tf.compat.v1.placeholder(tf.int32, [])
                self.retire = self.retired.scatter_update(
                    tf.IndexedSlices(tf.constant([True]), self.slowest[None])
                )
        return [self.clocks, self.retired, self.blocked, self.widest]

    def push(self, g: PSGraph, grads, read_version, record):
        tf = g.tf
        me = g.role.index
        ok, done, _ = super().push(g, grads, read_version, record)
        with tf.compat.v1.device("/job:ps/task:0"), tf.control_dependencies([done]):
            # [ssp] the clock moves once the update is written (not when refused at the limit)
            one = tf.IndexedSlices(tf.cast(ok, tf.int64)[None], tf.constant([me]))
            clocks = self.clocks.scatter_add(one).read_value()
            retired = self.retired.read_value()
            live = tf.where(retired, tf.fill(tf.shape(clocks), clocks.dtype.max), clocks)
            # My lead over the slowest live worker, as my next step would start with it.
            lead = clocks[me] - tf.reduce_min(live)
            wait = tf.logical_and(tf.logical_not(retired[me]), lead > self.staleness)
            widest = self.widest.scatter_max(
                tf.IndexedSlices(tf.where(wait, tf.constant(0, tf.int64), lead)[None], [me])
            )
        return ok, tf.group(clocks, widest), wait

    @staticmethod
    def gap(clocks, retired, me: int) -> tuple[int, int | None]:
        """(this worker's lead over the slowest live worker, that worker's index or None)."""
        live = [(int(c), w) for w, (c, r) in enumerate(zip(clocks, retired, strict=True)) if not r]
        if retired[me] or not live:
            return 0, None
        slowest, who = min(live)
        return int(clocks[me]) - slowest, who

    def block(self, sess, g: PSGraph, wait_op) -> None:
        """Polls the clocks until this worker is within the bound; records the wait."""
        me = g.role.index
        start = time.monotonic()
        last_slowest, since = None, start
        pause, longest = POLL_SECONDS
        while True:
            clocks, retired, stop = sess.run(self.read_poll)
            lead, who = self.gap(clocks, retired, me)
            if lead <= self.staleness or stop:  # (at the end the others may be gone)
                break
            now = time.monotonic()
            slowest = int(clocks[who])
            if slowest != last_slowest:
                last_slowest, since = slowest, now
            elif now - since > self.patience:
                sess.run(self.retire, {self.slowest: who})
                print(
                    f"[ssp] worker {me}: worker {who} has not moved for {self.patience:g} s "
                    f"at clock {slowest}: left out of the staleness bound",
                    flush=True,
                )
                continue
            time.sleep(pause)
            pause = min(2 * pause, longest)
        sess.run(self.record_wait, {self.seconds: time.monotonic() - start, self.lead: lead})

    def history(self, sess, g: PSGraph) -> dict:
        (clocks, retired), (blocked, widest) = sess.run([self.read_all, self.read_waits])
        return {
            "staleness_bound": self.staleness,
            "clocks": [int(c) for c in clocks],
            "retired_workers": [w for w, r in enumerate(retired) if r],
            "blocked_seconds_by_worker": {str(w): float(s) for w, s in enumerate(blocked)},
            "clock_gap_by_worker": {str(w): int(n) for w, n in enumerate(widest)},
        }


@register
class SSP(ParameterServerMode):
    """Stale-synchronous parallel on the parameter servers: async within a staleness bound."""

    name = "ssp"
    example = "ssp:2:staleness=2"
    options = {
        **ParameterServerMode.options,
        "staleness": "clocks a worker may run ahead of the slowest (0: bulk-synchronous)",
        "patience": f"seconds a worker that does not move is waited for (default "
        f"{PATIENCE_SECONDS}), then left out of the bound",
    }

    @classmethod
    def check(cls, workers: int, options: dict) -> dict:
        checked = super().check(workers, options)
        staleness = cls.integer(options, "staleness")
        if staleness is None:
            raise ConfigError("ssp: the staleness bound is required, e.g. ssp:2:staleness=2")
        if staleness < 0:
            raise ConfigError(f"ssp: staleness must be 0 or more, got {staleness}")
        patience = cls.integer(options, "patience", PATIENCE_SECONDS)
        if patience < 1:
            raise ConfigError(f"ssp: patience must be at least 1 second, got {patience}")
        return {**checked, "staleness": staleness, "patience": patience}

    def short_name(self) -> str:
        return f"{self.spec.mode}:{self.spec.workers}:staleness={self.spec.option('staleness')}"

    def rule(self) -> PushRule:
        return SSPRule(int(self.spec.option("staleness")), int(self.spec.option("patience")))

    @classmethod
    def columns(cls, run: dict, history: dict) -> dict:
        blocked = history.get("blocked_seconds_by_worker") or {}
        gaps = history.get("clock_gap_by_worker") or {}
        return {
            **super().columns(run, history),
            "aggregation": f"S={(run.get('options') or {}).get('staleness')}",
            "blocked_seconds": sum(blocked.values()) if blocked else None,
            "clock_gap_max": max(gaps.values()) if gaps else None,
        }
