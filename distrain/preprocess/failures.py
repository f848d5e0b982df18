"""How distrain fails: one line saying which step, where and what, and whether to retry.

Every command and every pipeline step that fails ends with one line,
``distrain: STEP failed: MESSAGE``, where the message names the file (and line or record)
and what was expected. The traceback is printed only with ``--debug`` (which sets
``$DISTRAIN_DEBUG``, inherited by the steps and training processes).

Errors are told apart (:func:`classify`):

* **permanent** (not retried): bad input, bad parameters, a missing file. Every
  ``ValueError`` of distrain (:class:`~distrain.train.config.ConfigError`, among them a
  checkpoint of another model, :class:`~distrain.base.errors.StepError`,
  :class:`~distrain.learning.inputs.DataError`, a data set's format errors (a file header
  with impossible sizes among them) and its preprocessing job's,
  :class:`~distrain.preprocess.writing.BadRecordsError`, a used output folder, an unsafe
  archive, an archive past its size or member limit, ...), a download whose digest did
  not match, a corrupt archive or record
  (``tarfile``/``zipfile`` errors, TensorFlow's ``DataLossError``), ``FileNotFoundError``,
  ``PermissionError``, a missed quality gate, an HTTP or Kubernetes API answer 4xx
  but 408/429, and any error raised from the user's own code (its traceback passes
  through a file :func:`add_user_code` registered: the user's model file), named by that
  file and line;
* **transient** (retried with backoff): lost workers and processes
  (:class:`~distrain.train.config.TrainingError`), network errors (``ConnectionError``,
  ``TimeoutError``, ``urllib``'s ``URLError`` without an answer), unavailable servers
  (gRPC errors, HTTP and Kubernetes 5xx, 408, 429), a download past its overall deadline
  (:class:`~distrain.preprocess.download.DownloadDeadlineError`, a ``TimeoutError``: the
  partial file is kept and the retried step resumes it where it stopped, so a slow link
  still gets the file), and anything distrain does not know (it was retried before this
  module existed, and still is). A network or server error stays transient even when the
  user's code was on its way.

A process or step that produced no result never exits 0: the user's code cannot end one
quietly (``sys.exit``, ``KeyboardInterrupt``, ``os._exit``: caught where the user's code
is called, :mod:`distrain.learning.usermodel`), and what cannot be caught is seen by what
waits for the result: the local launcher (the main process's ``history.json`` and
``model.keras``) and ``distrain run`` (each step's executor output) fail naming it.

A pipeline step writes its failure as ``executor_error.json`` beside its executor output
file (``dirname(executor_input.outputs.outputFile)``, where Google Cloud's pipeline
components write theirs), ``{"errorMessage": ..., "step", "retryable", "exception",
"exitCode"}``, and into the container's termination message (``/dev/termination-log``),
which Kubernetes keeps with the pod and KFP shows as the step's message. Exit codes: 2
for a permanent error of input or parameters, 1 otherwise.

``kfp.local`` retries every failed attempt of a task that has a retry policy, as KFP
2.17 on a cluster does (its retry policy is a count and a backoff, without a condition).
:func:`local_retries_stop_on_permanent_errors` makes a local run read each failed
attempt's error file and stop at once on a permanent error; a transient one goes on to
the task's retry policy.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path

from distrain.base.gate import GateFailed
from distrain.preprocess.download import ChecksumError

DEBUG_ENV = "DISTRAIN_DEBUG"
# Where a step writes its error (for tests and steps outside KFP; KFP steps find theirs
# from the executor input) and the container's termination message file.
ERROR_FILE_ENV = "DISTRAIN_ERROR_FILE"
TERMINATION_LOG_ENV = "DISTRAIN_TERMINATION_LOG"
TERMINATION_LOG = "/dev/termination-log"
ERROR_FILE = "executor_error.json"
# Kubernetes keeps at most 4096 bytes of a termination message.
TERMINATION_LOG_LIMIT = 4096

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2


# The user's code: files whose frames in a traceback make its error the user's (permanent).
_USER_CODE: set[str] = set()
# TensorFlow's errors of a lost or unavailable server: transient, whoever called.
_TRANSIENT_TF = {"UnavailableError", "AbortedError", "CancelledError", "DeadlineExceededError"}
# A line of a traceback's text that gives an error: ``TypeError: ...``.
_ERROR_LINE = re.compile(r"[\w.]*(Error|Exception|Exit|Interrupt)\b: ")


def add_user_code(path: str | os.PathLike) -> None:
    """Registers a file of the user's code (what :func:`user_frame` looks for)."""
    _USER_CODE.update((str(path), str(Path(path).resolve())))


def user_frame(exc: BaseException) -> str:
    """``FILE:LINE`` of the innermost frame of the user's code in ``exc``'s traceback, or "".

    The exceptions it was raised from (``__cause__``, ``__context__``, even when suppressed:
    tf-keras raises its errors again ``from None``) count too.
    """
    seen: set[int] = set()
    while _USER_CODE and exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        theirs = [f for f in _frames(exc) if f.filename in _USER_CODE]
        if theirs:
            return f"{theirs[-1].filename}:{theirs[-1].lineno}"
        exc = exc.__cause__ or exc.__context__
    return ""


def _frames(exc: BaseException) -> list:
    """The frames of ``exc``'s traceback, innermost last.

    An error raised while TensorFlow traced a function (a layer's ``call``) is raised
    again from autograph's generated copy of the code; the frames of the code itself are
    in its ``ag_error_metadata`` (innermost first), and come last here.
    """
    frames = list(traceback.extract_tb(exc.__traceback__))
    traced = getattr(getattr(exc, "ag_error_metadata", None), "translated_stack", None)
    return frames + list(reversed(traced or ()))


def _user_message(exc: BaseException, where: str) -> str:
    """The one line of an error raised from the user's code, at ``where``."""
    cause = getattr(getattr(exc, "ag_error_metadata", None), "cause_message", "")
    if cause:  # autograph's message lists the traced stack: the error's own line is its last
        lines = [p.strip() for p in str(cause).splitlines() if p.strip()]
        errors = [p for p in lines if _ERROR_LINE.match(p) and "Exception encountered" not in p]
        message = errors[-1] if errors else f"{type(exc).__name__}: {lines[0] if lines else ''}"
    else:
        message = one_line(exc)
    return message if where.rsplit(":", 1)[0] in message else f"{where}: {message}"


def debug() -> bool:
    """Whether ``--debug`` is on (tracebacks are printed)."""
    return os.environ.get(DEBUG_ENV, "") not in ("", "0")


def classify(exc: BaseException) -> bool:
    """Whether ``exc`` is transient (worth retrying) rather than permanent.

    See the module's docstring for the two lists.
    """
    import tarfile
    import urllib.error
    import zipfile

    said = getattr(exc, "retryable", None)
    if isinstance(said, bool):  # the failed process said so (launch.WorkerFailed)
        return said
    status = _api_status(exc)
    if isinstance(exc, urllib.error.HTTPError):  # an HTTP server's answer
        status = exc.code
    if status is not None:  # a Kubernetes, KFP or HTTP answer
        return status == 0 or status >= 500 or status in (408, 429)
    if isinstance(exc, ChecksumError):
        return False  # the pinned file is not what the server has: the same again
    if isinstance(exc, ConnectionError | TimeoutError | urllib.error.URLError):
        return True  # network
    if type(exc).__name__ in _TRANSIENT_TF:  # a lost server, wherever it was called from
        return True
    if user_frame(exc):  # the user's code raised it: it raises it again
        return False
    if isinstance(exc, GateFailed | tarfile.TarError | zipfile.BadZipFile):
        return False  # a missed gate; a corrupt or unsafe archive
    if type(exc).__name__ == "DataLossError":  # TensorFlow: a corrupt record or file
        return False
    if isinstance(exc, ValueError | FileNotFoundError | NotADirectoryError | PermissionError):
        return False
    return True


def _api_status(exc: BaseException) -> int | None:
    """The HTTP status of a Kubernetes or KFP client error (``ApiException``), if it is one."""
    if type(exc).__name__ != "ApiException":
        return None
    status = getattr(exc, "status", None)
    return int(status) if isinstance(status, int) else 0


def one_line(exc: BaseException) -> str:
    """The exception's message as one line (lines joined with ``; ``).

    Errors distrain raises say what and where; anything else is prefixed with its type.
    """
    text = str(exc).strip()
    if isinstance(exc, KeyError) and len(exc.args) == 1:
        text = repr(exc.args[0])
    if isinstance(exc, SystemExit):
        text = f"the code ended the process (exit code {exc.code!r}) and produced no result"
    parts = [p.strip() for p in text.splitlines() if p.strip()]
    text = "; ".join(parts).replace(":;", ":")
    if not _is_distrain_error(exc):
        text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text or type(exc).__name__


def _is_distrain_error(exc: BaseException) -> bool:
    module = type(exc).__module__ or ""
    return module == "distrain" or module.startswith("distrain.")


@dataclass(frozen=True)
class Failure:
    """A failed step: what the one line, the error file and the exit code say.

    Attributes:
        step: The step (a pipeline step's display name, or the command).
        message: One line: the file (and line or record) and what was expected.
        retryable: Transient (worth retrying) or permanent.
        exception: The exception's type name.
        exit_code: 2 for bad input or parameters, 1 otherwise.
        attempts: Attempts made (a retried step's), when known.
    """

    step: str
    message: str
    retryable: bool
    exception: str = ""
    exit_code: int = EXIT_FAILED
    attempts: int = 1

    @classmethod
    def of(cls, step: str, exc: BaseException) -> Failure:
        """The failure that ``exc`` makes of ``step``."""
        retryable = classify(exc)
        bad_input = not retryable and not isinstance(exc, GateFailed)
        where = user_frame(exc)  # the user's file and line
        message = _user_message(exc, where) if where else one_line(exc)
        return cls(
            step=step,
            message=message,
            retryable=retryable,
            exception=type(exc).__name__,
            exit_code=EXIT_BAD_INPUT if bad_input else EXIT_FAILED,
        )

    def line(self) -> str:
        """``distrain: STEP failed: MESSAGE`` (and the attempts, when more than one)."""
        tries = f" after {self.attempts} attempts" if self.attempts > 1 else ""
        return f"distrain: {self.step} failed{tries}: {self.message}"

    def to_json(self) -> dict:
        """The error file: ``errorMessage`` (Google Cloud's form), then distrain's fields."""
        data = {"errorMessage": self.line()}
        data.update(asdict(self))
        data["exitCode"] = data.pop("exit_code")
        return data

    @classmethod
    def from_json(cls, data: dict) -> Failure:
        """Reads :meth:`to_json`'s form back."""
        return cls(
            step=str(data.get("step", "")),
            message=str(data.get("message") or data.get("errorMessage", "")),
            retryable=bool(data.get("retryable", True)),
            exception=str(data.get("exception", "")),
            exit_code=int(data.get("exitCode", EXIT_FAILED)),
            attempts=int(data.get("attempts", 1)),
        )


class StepFailed(Exception):
    """A step of a run failed; carries its :class:`Failure` (raised by ``distrain run``)."""

    def __init__(self, failure: Failure):
        super().__init__(failure.line())
        self.failure = failure


def executor_error_path(argv: list[str] | None = None) -> Path | None:
    """Where this step writes its error file.

    ``$DISTRAIN_ERROR_FILE`` if set; in a KFP step, ``executor_error.json`` beside the
    executor output file named by the ``--executor_input`` argument of KFP's executor.
    """
    if os.environ.get(ERROR_FILE_ENV):
        return Path(os.environ[ERROR_FILE_ENV])
    argv = sys.argv if argv is None else argv
    try:
        executor_input = json.loads(argv[argv.index("--executor_input") + 1])
        output_file = executor_input["outputs"]["outputFile"]
    except (ValueError, IndexError, KeyError, TypeError):
        return None
    return Path(output_file).parent / ERROR_FILE


def write_error(failure: Failure, path: Path | None) -> None:
    """Writes the error file (when there is a path) and the termination message."""
    if path is not None:
        with contextlib.suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(failure.to_json(), indent=2) + "\n")
    log = os.environ.get(TERMINATION_LOG_ENV, TERMINATION_LOG)
    if os.environ.get(TERMINATION_LOG_ENV) or Path(log).exists():
        with contextlib.suppress(OSError):
            Path(log).write_bytes(failure.line().encode()[:TERMINATION_LOG_LIMIT])


def read_error(path: str | os.PathLike) -> Failure | None:
    """The failure a step wrote to ``path``, or None (no file, or not readable)."""
    try:
        return Failure.from_json(json.loads(Path(path).read_text()))
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def report(failure: Failure, exc: BaseException | None = None, out=None) -> None:
    """Prints the failure's one line (after the traceback, with ``--debug``)."""
    out = out or sys.stderr
    sys.stdout.flush()
    if exc is not None and debug():
        traceback.print_exception(exc, file=out)
    print(failure.line(), file=out, flush=True)


@contextlib.contextmanager
def step_errors(step: str):
    """Runs a pipeline step's body; a failure ends the process with one line.

    The failure is written to the step's error file and termination message, and the
    process exits with :attr:`Failure.exit_code` (no traceback unless ``--debug``).
    ``sys.exit`` or ``KeyboardInterrupt`` from the user's code (:func:`user_frame`) is such
    a failure too: it may not end the step as if it had succeeded.
    """
    try:
        yield
    except (SystemExit, KeyboardInterrupt) as exc:
        if not user_frame(exc):
            raise
        _step_failed(step, exc)
    except Exception as exc:  # noqa: BLE001 (every failure gets its line and file)
        _step_failed(step, exc)


def _step_failed(step: str, exc: BaseException) -> None:
    failure = Failure.of(step, exc)
    write_error(failure, executor_error_path())
    report(failure, exc)
    raise SystemExit(failure.exit_code) from None


# ---- kfp.local: a permanent error is not retried ---------------------------------------------

# What KFP's executor writes last, after the step's function returned (kfp.local's name).
EXECUTOR_OUTPUT = "executor_output.json"
NO_RESULT = (
    "the step's process exited 0 but produced no result (no {}, which KFP's executor writes "
    "when the step's function returns): something ended it early, as os._exit in the "
    "user's code does"
)


@contextlib.contextmanager
def local_retries_stop_on_permanent_errors():
    """While active, ``kfp.local`` stops a task at its first permanent failure.

    kfp.local's retry loop (``kfp.local.orchestrator.task_executor``) calls
    ``kfp.local.task_dispatcher.run_single_task_implementation`` once per attempt and
    retries every failed one. This wraps that call: before an attempt it removes the
    task's old error file; after a failed one it reads the file the step wrote, and on a
    permanent failure raises :class:`StepFailed`, which ends the retry loop (the
    orchestrator marks the task failed). A transient failure is returned as it was, to
    the task's retry policy and its backoff. An attempt that exited 0 without its
    executor output (the process was ended before its function returned) fails the task
    at once, permanently: a step that produced no result never passes as done.

    Yields:
        The list of failures seen, in order (the last is the run's).
    """
    from kfp.local import executor_input_utils, status, task_dispatcher

    original = task_dispatcher.run_single_task_implementation
    failures: list[Failure] = []
    attempts: dict[str, int] = {}

    def attempt(**kwargs):
        task_root = executor_input_utils.construct_local_task_root(
            pipeline_root=kwargs["pipeline_root"],
            pipeline_resource_name=kwargs["pipeline_resource_name"],
            task_resource_name=executor_input_utils.get_local_task_resource_name(
                kwargs["component_name"]
            ),
        )
        error_file = Path(task_root) / ERROR_FILE
        error_file.unlink(missing_ok=True)
        promised = Path(task_root) / EXECUTOR_OUTPUT
        promised.unlink(missing_ok=True)
        outputs, result = original(**kwargs)
        name = kwargs["component_name"].removeprefix("comp-")
        if result == status.Status.SUCCESS and not promised.is_file():
            # Exit 0 without the executor's last write (os._exit in the user's code):
            # no result, and the same code ends the same way again.
            failure = Failure(step=name, message=NO_RESULT.format(promised), retryable=False)
            failures.append(failure)
            report(failure)
            raise StepFailed(failure)
        if result != status.Status.FAILURE:
            return outputs, result
        attempts[task_root] = attempts.get(task_root, 0) + 1
        failure = read_error(error_file) or Failure(
            step=name, message="the step's process failed without a word", retryable=True
        )
        failure = Failure(**{**asdict(failure), "attempts": attempts[task_root]})
        failures.append(failure)
        if not failure.retryable:
            raise StepFailed(failure)  # the step's log ends with its line already
        print(f"{failure.line()} (transient: retried as the step's retry policy says)")
        return outputs, result

    task_dispatcher.run_single_task_implementation = attempt
    try:
        yield failures
    finally:
        task_dispatcher.run_single_task_implementation = original
