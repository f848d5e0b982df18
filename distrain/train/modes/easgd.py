"""``easgd``: asynchronous elastic averaging SGD: workers' own copies pulled toward a centre."""

from __future__ import annotations

from distrain.base.errors import ConfigError
from distrain.learning.choices import make_optimizer
from distrain.train.modes import register
from distrain.train.ps.graph import PSGraph
from distrain.train.ps.mode import ParameterServerMode
from distrain.train.ps.rules import PushRule

# The adaptive period's steps at the start (its default threshold is 4 first-guess losses).
ADAPTIVE_START = 4


class EASGDRule(PushRule):
    """[easgd] Each worker trains its own copy; every period it exchanges with the centre.

    Asynchronous EASGD (Zhang, Choromanska and LeCun 2015): a worker's step updates its
    own copy ``x_i`` of the model (on the worker, with its own optimizer: Adam, or the
    model file's). After every ``tau``
    of its steps (or, adaptive, once its summed training loss since the last exchange
    reaches ``threshold``: seed 001's rule, the period grows as the loss falls) it pulls
    its copy toward the centre ``c`` on the parameter servers and the centre toward it,
    by the same elastic difference: ``d = alpha (x_i - c)``, ``x_i -= d``, ``c += d``. No
    lock, as the seed's parameter exchanger: concurrent exchanges add their differences.
    The centre is the model the chief evaluates, checkpoints and saves.

    The adaptive period is bounded (issue 51): a worker also exchanges once ``bound`` of
    its steps have passed since its last exchange, whatever its summed loss. The bound is
    an epoch's steps over the workers, ``updates_per_epoch // workers`` (at least 1): an
    epoch is ``updates_per_epoch`` steps shared by the workers, so at least one worker
    makes ``bound`` consecutive steps in it, and one of them ends a period: the centre
    moves at least once per epoch, and an evaluation at an epoch's end never scores the
    same centre as the one before (which the plateau stop would read as converged).

    Non-trainable state (batch norm's moving statistics) is part of each copy: a
    worker's step moves its copy's, and every exchange pulls them and the centre's
    together by the same elastic difference as the weights, so the centre's statistics
    are the elastic average of the copies'.

    A step is counted (and refused at the chief's limit) as async's is: an epoch is a
    pass's worth of steps over all workers.

    Args:
        alpha: The moving rate, in (0, 1).
        tau: Steps between exchanges, or None for the adaptive period.
        threshold: The adaptive period's summed loss.
        bound: The adaptive period's most steps (None: an epoch's steps over the workers).
    """

    def __init__(
        self,
        alpha: float,
        tau: int | None,
        threshold: float | None = None,
        bound: int | None = None,
    ):
        self.alpha, self.tau, self.threshold, self.bound = alpha, tau, threshold, bound

    def create_variables(self, g: PSGraph) -> list:
        tf = g.tf
        workers = g.role.workers
        with tf.compat.v1.device("/job:ps/task:0"):
            # Per worker: its exchanges, and its copy's distance to the centre at the last.
            self.rounds = tf.Variable(tf.zeros([workers], tf.int64), name="easgd_rounds")
            self.distance = tf.Variable(tf.zeros([workers], tf.float32), name="easgd_distance")
            self.read = [self.rounds.read_value(), self.distance.read_value()]
        self.divergence: list[list[float]] = []  # the chief's samples: [seconds, mean]
        self._last_rounds = 0
        return [self.rounds, self.distance]

    def trained(self, g: PSGraph):
        if g.role.job != "worker":
            return g.model, g.variables
        tf = g.tf
        from distrain.learning.optim import initializer

        # [easgd] the worker's own copy and optimizer, on the worker (the caller's device)
        self.model = g.build_model()
        if not self.tau and self.threshold is None:
            # Four steps' worth of a first guess's loss at the start (its task's).
            self.threshold = 4 * g.task.first_guess_loss(g.info)
        if not self.tau and self.bound is None:
            self.bound = adaptive_bound(g.per_epoch, g.role.workers)
        # (distrain's Adam, or the model file's own optimizer: each copy has its own)
        self.optimizer = make_optimizer(
            g.spec,
            g.info,
            g.cfg.effective_learning_rate,
            examples=g.cfg.batch_size,
            run_updates=g.per_epoch * g.cfg.schedule_span,
        )
        self.optimizer.build(self.model.trainable_variables)
        # Steps, or summed loss, since the last exchange.
        self.since = tf.Variable(0.0, trainable=False, name="easgd_since")
        # Steps since the last exchange (the adaptive period's bound).
        self.steps_since = tf.Variable(0.0, trainable=False, name="easgd_steps_since")
        own = [*self.model.variables, *self.optimizer.variables, self.since, self.steps_since]
        self.init_own = initializer(own, self.optimizer)
        pairs = zip(self.model.variables, g.model.variables, strict=True)
        self.from_centre = tf.group([mine.assign(centre) for mine, centre in pairs])
        return self.model, self.model.trainable_variables

    def worker_start(self, sess, g: PSGraph) -> None:
        sess.run(self.init_own)
        sess.run(self.from_centre)  # [easgd] every copy starts at the centre

    def push(self, g: PSGraph, grads, read_version, record):
        tf = g.tf
        pairs = list(zip(self.model.variables, g.model.variables, strict=True))
        # [easgd] the step updates the worker's own copy first: nothing of it is shared.
        update = self.optimizer.apply_gradients(
            zip(grads, self.model.trainable_variables, strict=True)
        )
        # [easgd] the forward pass's writes to the copy's own statistics run with its step
        update = tf.group(update, *[u.op for u in g.forward])
        with tf.control_dependencies([update]):
            # The period: steps, or (adaptive) the summed loss.
            grown = self.since.read_value() + (1.0 if self.tau else g.step_loss)
            steps = self.steps_since.read_value() + 1.0
            due = grown >= (float(self.tau) if self.tau else self.threshold)
            if not self.tau:  # [easgd] adaptive, bounded: at least once every `bound` steps
                due = tf.logical_or(due, steps >= float(self.bound))

        number, ok, since = tf.cond(
            due,
            lambda: self._exchange(g, pairs, grown, steps),
            lambda: self._count(g, update, grown, steps),
        )
        with tf.compat.v1.device("/job:ps/task:0"):
            granted = tf.cast(ok, tf.int64)
            # No stale gradients: each worker's go to its own copy (delay 0).
            stats = record(number - 1, granted, granted, tf.constant(0, tf.int64))
            done = tf.group(since, *stats)
        return ok, done, None

    @staticmethod
    def _claim(g: PSGraph, after):
        """The step's update number, taken once ``after`` is on the parameter servers."""
        tf = g.tf
        with tf.compat.v1.device("/job:ps/task:0"), tf.control_dependencies(after):
            number = g.version.assign_add(1)
            return number, number <= g.limit.read_value()

    def _exchange(self, g: PSGraph, pairs, grown, steps):
        """An exchange: the centre and the copy move toward each other by ``alpha``."""
        tf = g.tf
        me = g.role.index
        # The copy goes to the parameter servers first, then the step claims its number:
        # a worker that dies after that holds nothing the servers wait for.
        staged = []
        for mine, centre in pairs:
            with tf.compat.v1.device(centre.device):
                staged.append(tf.identity(mine.read_value()))
        number, ok = self._claim(g, staged)

        def move():
            diffs, writes, squares = [], [], []
            for value, (_, centre) in zip(staged, pairs, strict=True):
                with tf.compat.v1.device(centre.device):
                    gap = value - centre.read_value()
                    squares.append(tf.reduce_sum(tf.square(gap)))
                    diffs.append(self.alpha * gap)
                    writes.append(centre.assign_add(diffs[-1]))
            with tf.compat.v1.device("/job:ps/task:0"):
                one = tf.IndexedSlices(tf.constant([1], tf.int64), [me])
                distance = tf.sqrt(tf.add_n(squares))
                writes.append(self.rounds.scatter_add(one))
                writes.append(self.distance.scatter_update(tf.IndexedSlices(distance[None], [me])))
                with tf.control_dependencies(writes):
                    writes.append(g.count_applied())
            with tf.control_dependencies(writes):
                return [tf.identity(d) for d in diffs]

        def refuse():
            with tf.compat.v1.device("/job:ps/task:0"):
                back = g.version.assign_sub(1)
            with tf.control_dependencies([back]):
                return [tf.zeros_like(value) for value in staged]

        # [easgd] the decision runs on the parameter servers: once the copy is there, a
        # claimed number is applied (or given back) even if the worker dies meanwhile.
        with tf.compat.v1.device("/job:ps/task:0"):
            diffs = tf.cond(ok, move, refuse)
        # The copy takes its share (nothing when refused: it goes again after the limit).
        moved = [mine.assign_sub(d) for (mine, _), d in zip(pairs, diffs, strict=True)]
        with tf.control_dependencies(moved):
            since = tf.group(
                self.since.assign(tf.where(ok, 0.0, grown)),
                self.steps_since.assign(tf.where(ok, 0.0, steps)),
            )
        return number, ok, since

    def _count(self, g: PSGraph, update, grown, steps):
        """A step without an exchange: its update number is counted, the period grows."""
        tf = g.tf
        number, ok = self._claim(g, [update])

        def counted():
            with tf.compat.v1.device("/job:ps/task:0"):
                return tf.cast(g.count_applied(), tf.float32)

        def refuse():
            with tf.compat.v1.device("/job:ps/task:0"):
                return tf.cast(g.version.assign_sub(1), tf.float32)

        with tf.compat.v1.device("/job:ps/task:0"):  # as above: not on the worker
            done = tf.cond(ok, counted, refuse)
        with tf.control_dependencies([done]):
            since = tf.group(self.since.assign(grown), self.steps_since.assign(steps))
        return number, ok, since

    def sample(self, sess, g: PSGraph, seconds: float) -> None:
        rounds, distance = sess.run(self.read)
        total = int(rounds.sum())
        if total != self._last_rounds and (rounds > 0).any():
            self._last_rounds = total
            self.divergence.append([seconds, float(distance[rounds > 0].mean())])

    def exchanges(self, sess) -> int:
        """Exchanges with the centre so far, over every worker (each moves the centre)."""
        rounds, _ = sess.run(self.read)
        return int(rounds.sum())

    def history(self, sess, g: PSGraph) -> dict:
        rounds, _ = sess.run(self.read)
        size = sum(v.shape.num_elements() * v.dtype.size for v in g.model.variables)
        per_worker = 2 * size * float(rounds.mean()) if len(rounds) else 0.0
        return {
            "communication_rounds": int(rounds.sum()),
            "rounds_by_worker": {str(w): int(n) for w, n in enumerate(rounds)},
            # Each exchange reads the centre and sends the difference: twice the model.
            "bytes_per_worker": int(per_worker),
            "divergence": self.divergence,
            "moving_rate": self.alpha,
            # The adaptive period's most steps (None: a fixed period).
            "period_bound": None if self.tau else adaptive_bound(g.per_epoch, g.role.workers),
        }


def adaptive_bound(updates_per_epoch: int, workers: int) -> int:
    """The adaptive period's most steps: an epoch's steps over the workers (at least 1).

    An epoch is ``updates_per_epoch`` steps shared by the workers, so one of them makes at
    least this many in it: its period ends in the epoch, and the centre moves.
    """
    return max(1, updates_per_epoch // max(workers, 1))


@register
class EASGD(ParameterServerMode):
    """Asynchronous elastic averaging: workers' copies exchange with a centre every tau steps."""

    name = "easgd"
    example = "easgd:2:tau=4"
    options = {
        **ParameterServerMode.options,
        "tau": "steps between a worker's exchanges, or adaptive (required)",
        "alpha": "moving rate (default 0.9 / workers)",
        "threshold": "adaptive period: summed training loss between exchanges "
        "(default 4 ln(classes), a regression's 4 label variances: about 4 steps at the start, "
        "more as the loss falls)",
    }

    @classmethod
    def check(cls, workers: int, options: dict) -> dict:
        checked = super().check(workers, options)
        if options.get("tau") is None:
            raise ConfigError("easgd: tau is required (e.g. easgd:2:tau=4 or tau=adaptive)")
        adaptive = str(options["tau"]) == "adaptive"
        tau = "adaptive" if adaptive else cls.integer(options, "tau")
        if not adaptive and tau < 1:
            raise ConfigError(f"easgd: tau must be at least 1 step, got {tau}")
        if "threshold" in options:
            if not adaptive:
                raise ConfigError("easgd: threshold goes with tau=adaptive")
            checked["threshold"] = _number(options, "threshold")
            if checked["threshold"] <= 0:
                raise ConfigError(f"easgd: threshold must be positive, got {options['threshold']}")
        alpha = _number(options, "alpha") if "alpha" in options else 0.9 / workers
        if not 0 < alpha < 1:
            raise ConfigError(f"easgd: alpha must be between 0 and 1, got {alpha}")
        return {**checked, "tau": tau, "alpha": alpha}

    def short_name(self) -> str:
        return f"{self.spec.mode}:{self.spec.workers}:tau={self.spec.option('tau')}"

    def min_exchanges(self, updates_per_epoch: int) -> int:
        """[easgd] One epoch's worth of exchanges at the period (adaptive: its first, 4).

        Adaptive, the period grows past 4 as the loss falls: the minimum then takes
        several epochs, each with at least one exchange (the bound).
        """
        tau = self.spec.option("tau")
        period = ADAPTIVE_START if tau == "adaptive" else int(tau)
        return max(1, updates_per_epoch // period)

    def rule(self) -> PushRule:
        spec = self.spec
        tau = spec.option("tau")
        if tau == "adaptive":
            return EASGDRule(spec.option("alpha"), None, spec.option("threshold"))
        return EASGDRule(spec.option("alpha"), int(tau))

    @classmethod
    def columns(cls, run: dict, history: dict) -> dict:
        divergence = history.get("divergence") or []
        return {
            **super().columns(run, history),
            "aggregation": f"alpha={history.get('moving_rate', 0):.2g}",
            "communication_rounds": history.get("communication_rounds"),
            "megabytes_per_worker": (history.get("bytes_per_worker") or 0) / 1e6 or None,
            "divergence": divergence[-1][1] if divergence else None,
        }


def _number(options: dict, key: str) -> float:
    try:
        return float(options[key])
    except ValueError:
        raise ConfigError(f"easgd: {key} must be a number, got {options[key]!r}") from None
