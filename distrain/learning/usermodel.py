"""A model from the user's code: ``--model FILE.py:FUNCTION`` or ``package.module:FUNCTION``.

A *model reference* names a function in the user's code, as uvicorn and entry points name
an attribute (``module:attr``): ``path/to/my_model.py:build`` (a file, imported by path)
or ``my_package.models:build`` (a module on ``sys.path``, e.g. installed in an image
built ``FROM`` distrain's trainer). ``@TASK`` after it names one of distrain's tasks
(:data:`distrain.learning.tasks.TASKS`); without it the task is classification.

``FUNCTION(info, seed)`` returns an uncompiled tf-keras model that outputs logits.
``info`` is the :class:`~distrain.learning.inputs.DatasetInfo` of the data as the model reads
it: ``info.features`` (name -> :class:`~distrain.learning.inputs.Feature`), ``info.label``,
``info.num_classes`` and ``info.feature_spec.as_dict`` (whether the model is called with
a dict of the features keyed by name, or with the one feature's tensor).

The same module may define the user's own training choices, ``loss(info)``,
``optimizer(info)`` and ``class_weights(info)`` (:func:`choices`; what they may be and how
every mode applies them: :mod:`distrain.learning.choices`); a model's spec carries them.

Whatever goes wrong in the user's code (a syntax or import error, a missing function, an
exception while building, a return that is not a tf-keras model, logits of the wrong
width) is a :class:`UserModelError`: a ``ValueError`` (permanent, exit 2, never retried,
:mod:`distrain.preprocess.failures`) whose one line names the user's file and line.

The user's code runs here only (:func:`load_function` imports it, :func:`build` calls it),
under one guard (:func:`_users_code`): it cannot end the process quietly. ``sys.exit``,
``raise SystemExit``, ``KeyboardInterrupt`` and ``os._exit`` (on the thread running it)
from its import or its function become a :class:`UserModelError` naming its file and line.
Its file is registered with :func:`distrain.preprocess.failures.add_user_code`, so an error raised
later through it (a custom layer's ``call`` while training) is permanent too. What no guard
can catch (``os._exit`` from a layer while training) is caught by what waits for the
result: a process or step that produced none fails (:mod:`distrain.preprocess.failures`).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import inspect
import os
import shutil
import sys
import threading
import traceback
from dataclasses import dataclass
from pathlib import Path

from distrain.datasets import USER_MODEL, ModelSpec, is_user_model
from distrain.learning import predict
from distrain.learning.choices import NAMES, Choices
from distrain.learning.predict import keras_load
from distrain.learning.tasks import CLASSIFICATION, TASKS
from distrain.preprocess.failures import add_user_code

# module:attr with dotted module names, or a path ending in .py; then :FUNCTION[@TASK].
_REFERENCE = USER_MODEL


class UserModelError(ValueError):
    """The user's model code failed to import, to build, or built the wrong thing."""


class _ProcessExit(SystemExit):
    """``os._exit(code)`` called by the user's code, made an exception (:func:`_users_code`).

    A ``SystemExit``: called later (``from os import _exit`` kept at import), it is told as
    the user's code ending the process, by the worker and the steps
    (:mod:`distrain.preprocess.failures`).
    """


def _describe(err: BaseException) -> str:
    """What the user's code did, in one line (an exit says that it would end the process)."""
    if isinstance(err, _ProcessExit):
        return f"os._exit({err.code!r}) called: it would end the process with no result"
    if isinstance(err, SystemExit):
        if err.code is None or isinstance(err.code, int):
            return f"sys.exit({err.code!r}) called: it would end the process with no result"
        return f"SystemExit: {err.code} (it would end the process with no result)"
    if isinstance(err, KeyboardInterrupt):
        return "KeyboardInterrupt raised: it would end the process with no result"
    return _one_line(err)


@contextlib.contextmanager
def _users_code(fallback: str, source: str = "", suffix: str = ""):
    """Runs the user's code: anything it raises, or any way it ends the process, is theirs.

    An exception, ``SystemExit`` and ``KeyboardInterrupt`` become a :class:`UserModelError`
    naming the user's file and line (:func:`_where`; ``suffix`` added to its message), as
    does ``os._exit`` called on this thread (replaced meanwhile; other threads keep it).

    Args:
        fallback: The place named when no frame of the user's code is in the traceback.
        source: The user's file, when known.
        suffix: What was being done (`` (in build)``).
    """
    real_exit, owner = os._exit, threading.get_ident()

    def guarded_exit(code):
        if threading.get_ident() != owner:
            real_exit(code)
        raise _ProcessExit(code)

    os._exit = guarded_exit
    try:
        yield
    except UserModelError:
        raise
    except BaseException as err:  # noqa: BLE001 (the user's code: any error or exit is theirs)
        raise UserModelError(f"{_where(err, fallback, source)}: {_describe(err)}{suffix}") from None
    finally:
        os._exit = real_exit


def spec(name: str, own: dict[str, ModelSpec]) -> ModelSpec:
    """The spec of a model in the user's code (:func:`distrain.learning.models.model_spec`).

    It reads the records as the data set's first own model of its task does (``own``:
    the data set's models). A split mode checks the built model before any process
    starts (:meth:`distrain.train.modes.Mode.check_model`).
    """
    ref = ModelReference.parse(name)
    task = TASKS[ref.task]
    view = next((m.view for m in own.values() if m.task is task), "")

    def build_it(info, seed):
        return build(ref, info, seed)

    return ModelSpec(
        build_it,
        task,
        view=view,
        summary=f"the user's {ref}",
        choices=Choices(lambda: choices(ref)),
    )


@dataclass(frozen=True)
class ModelReference:
    """A parsed model reference.

    Attributes:
        where: The ``.py`` file's path, or the dotted module name.
        function: The function's name.
        task: The task's name (:data:`distrain.learning.tasks.TASKS`).
    """

    where: str
    function: str
    task: str = CLASSIFICATION.name

    @classmethod
    def parse(cls, text: str) -> ModelReference:
        """Parses ``FILE.py:FUNCTION[@TASK]`` or ``package.module:FUNCTION[@TASK]``.

        Raises:
            UserModelError: Not a reference, or an unknown task.
        """
        found = _REFERENCE.match(str(text))
        if not found:
            raise UserModelError(
                f"model {text!r}: expected FILE.py:FUNCTION or package.module:FUNCTION "
                "(optionally @TASK)"
            )
        task = found["task"] or CLASSIFICATION.name
        if task not in TASKS:
            raise UserModelError(
                f"model {text!r}: unknown task {task!r}; expected one of {', '.join(TASKS)}"
            )
        return cls(found["where"], found["function"], task)

    @property
    def is_file(self) -> bool:
        """Whether it names a file (else a module on ``sys.path``)."""
        return self.where.endswith(".py")

    def with_file(self, path: str | os.PathLike) -> str:
        """The same reference with its file at ``path`` (where it was shipped to)."""
        task = "" if self.task == CLASSIFICATION.name else f"@{self.task}"
        return f"{path}:{self.function}{task}"

    def __str__(self) -> str:
        return self.with_file(self.where)


def _where(err: BaseException, fallback: str, source: str = "") -> str:
    """``FILE:LINE`` of the innermost frame of ``err`` in the user's code (or ``fallback``).

    ``source``: the user's file, when known: its innermost frame is the one named (an
    error raised inside a library the user's code called is still placed in that code).
    """
    if isinstance(err, SyntaxError) and err.filename:
        return f"{err.filename}:{err.lineno}"
    frames = traceback.extract_tb(err.__traceback__)
    if source:
        theirs = [f for f in frames if f.filename == source]
        if theirs:
            return f"{source}:{theirs[-1].lineno}"
    own = str(Path(__file__).resolve().parent.parent)
    user = [f for f in frames if not str(Path(f.filename).resolve()).startswith(own)]
    mine = [f for f in user if "site-packages" not in f.filename and "<frozen" not in f.filename]
    frame = (mine or user or [None])[-1]
    return f"{frame.filename}:{frame.lineno}" if frame is not None else fallback


def _one_line(err: BaseException) -> str:
    text = str(err.msg if isinstance(err, SyntaxError) else err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}".rstrip(": ")


def _module_name(path: Path) -> str:
    """The module name of the user's file: the same wherever, in whatever process, it is read.

    Keras writes a class's module into a saved model's config (an unregistered layer's, a
    subclassed ``keras.Model``'s). The training process imports the file where the run put
    it, the evaluation step a copy elsewhere (:func:`stage`, :func:`relocate`): the name is
    the hash of the file's content, not of its path, so the copy is the module the config
    names. The same code imported twice is the same module.
    """
    return "distrain_user_model_" + hashlib.sha256(path.read_bytes()).hexdigest()[:12]


def _import(ref: ModelReference):
    """``(module, where)``: the user's module imported (once per process), and its file.

    Raises:
        UserModelError: The file is missing, or the module fails to import (its file and
            line named).
    """
    if ref.is_file:
        path = Path(ref.where).resolve()
        if not path.is_file():
            raise UserModelError(f"{ref.where}: model file not found")
        add_user_code(path)  # an error raised through it later is the user's (permanent)
        name = _module_name(path)
        module = sys.modules.get(name)
        if module is None:
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            # Registered before it runs, as an import does: a class it defines is pickled,
            # or looked up by tf-keras, under this name.
            sys.modules[name] = module
            try:
                with _users_code(str(path), str(path)):
                    spec.loader.exec_module(module)
            except BaseException:
                del sys.modules[name]
                raise
        return module, str(path)
    with _users_code(ref.where, suffix=f" (importing {ref.where})"):
        module = importlib.import_module(ref.where)
    where = getattr(module, "__file__", None) or ref.where
    if where != ref.where:
        add_user_code(where)
    return module, where


def load_function(ref: ModelReference):
    """Imports the user's module and returns its function.

    Raises:
        UserModelError: The file is missing, the module fails to import (its file and line
            named), or it has no such function.
    """
    module, where = _import(ref)
    function = getattr(module, ref.function, None)
    if not callable(function):
        raise UserModelError(f"{where}: no function {ref.function!r} (model {ref})")
    return function


def choices(ref: ModelReference) -> dict:
    """The training choices the reference's module defines (:mod:`distrain.learning.choices`).

    Returns:
        ``{name: (function, "FILE:LINE")}`` for each of ``loss``, ``optimizer`` and
        ``class_weights`` the module defines; each function runs as the user's code
        (:func:`_users_code`: what it raises names its file and line).

    Raises:
        UserModelError: As :func:`load_function`, or one of the names is not a function.
    """
    function = load_function(ref)
    module = sys.modules.get(function.__module__)
    found = {}
    for name in NAMES:
        chosen = getattr(module, name, None)
        if chosen is None:
            continue
        if not (inspect.isfunction(chosen) or inspect.ismethod(chosen)):
            where = getattr(module, "__file__", None) or ref.where
            raise UserModelError(
                f"{where}: {name} is a {type(chosen).__name__}; define a function {name}(info) "
                "that returns it"
            )
        at = _defined_at(chosen)

        def guarded(info, chosen=chosen, at=at, name=name):
            with _users_code(at, _source_file(chosen), f" (in {name})"):
                return chosen(info)

        found[name] = (guarded, at)
    return found


def _source_file(function) -> str:
    try:
        return inspect.getsourcefile(function) or ""
    except TypeError:
        return ""


def _defined_at(function) -> str:
    try:
        return f"{inspect.getsourcefile(function)}:{inspect.getsourcelines(function)[1]}"
    except (OSError, TypeError):
        return getattr(function, "__module__", "") or "?"


def build(ref: ModelReference, info, seed: int):
    """Calls the user's function and checks what it returns.

    A model not built yet (a subclassed ``keras.Model``) is called once on the data's
    ``Input`` layers, so that its variables exist, made under the caller's scope (a
    parameter server's device).

    Returns:
        The tf-keras model, built.

    Raises:
        UserModelError: Building raised (the user's file and line named), the result is
            not a tf-keras model, or not one its task takes (:meth:`Task.check_model`: a
            regression's one value per example), or a classifier's logits are not
            ``num_classes`` wide.
    """
    import tensorflow as tf
    import tf_keras

    function = load_function(ref)
    at = _defined_at(function)
    with _users_code(at, _source_file(function), f" (in {ref.function})"):
        model = function(info, seed)
    if not isinstance(model, tf_keras.Model):
        kind = f"{type(model).__module__}.{type(model).__qualname__}"
        hint = " (a Keras 3 model: build it with tf_keras)" if "keras" in kind else ""
        raise UserModelError(f"{at}: {ref.function} returned a {kind}, not a tf-keras model{hint}")
    outputs = model.outputs
    if not model.built:
        # A subclassed model makes its variables on its first call: here, under the
        # caller's device scope (a parameter server's), not in the middle of a step.
        with _users_code(at, _source_file(type(model).call), " (calling the model)"):
            outputs = tf.nest.flatten(model(info.feature_spec.keras_inputs(tf_keras)))
    problem = TASKS[ref.task].check_model(model, info)
    if problem:
        raise UserModelError(f"{at}: {ref.function}'s model: {problem}")
    if ref.task == CLASSIFICATION.name and outputs:
        if len(outputs) != 1:
            raise UserModelError(
                f"{at}: {ref.function}'s model has {len(outputs)} outputs; a classifier "
                "has one, the logits"
            )
        width = outputs[0].shape[-1]
        if width != info.num_classes:
            raise UserModelError(
                f"{at}: {ref.function}'s model outputs {width} logits, the data set has "
                f"{info.num_classes} classes"
            )
    return model


def _keras_objects(module) -> dict:
    """The classes and functions the user's module defines, by name (tf-keras's custom objects).

    tf-keras finds a registered class by its registered name and any other by its module
    (:func:`_module_name`), except in a functional model's layers, which it looks up by
    class name only: these are given by name.
    """
    return {
        name: value
        for name, value in vars(module).items()
        if (inspect.isclass(value) or inspect.isfunction(value))
        and value.__module__ == module.__name__
    }


def load_saved(path: str | os.PathLike, reference: str, info=None, seed: int = 0):
    """Loads a saved model (``model.keras``) of ``reference``: the one way distrain loads one.

    A data set's model is tf-keras's load. A model of the user's code: the user's module is
    imported first (under its stable name, :func:`_module_name`: its registered classes
    register), then loaded with the module's classes and functions as custom objects and
    tf-keras's safe mode off (a ``Lambda`` layer's code is the user's own, which this
    process runs anyway). A model whose config cannot be revived (a subclassed
    ``keras.Model`` whose constructor takes what ``get_config`` cannot write, such as
    ``info``) is built again by the user's function (``info`` and ``seed`` given), and the
    saved weights are loaded into it.

    Raises:
        UserModelError: Neither way loads it (the user's file named).
    """
    if not is_user_model(reference):
        return keras_load(path)
    ref = ModelReference.parse(reference)
    module, where = _import(ref)
    try:
        return keras_load(path, custom_objects=_keras_objects(module), safe_mode=False)
    except Exception as err:  # noqa: BLE001 (whatever tf-keras raises: the weights' way next)
        failed = _one_line(err)
    if info is None:
        raise UserModelError(f"{where}: its model in {path} cannot be loaded: {failed}")
    model = build(ref, info, seed)
    try:
        model.load_weights(str(path))
    except Exception as err:  # noqa: BLE001
        raise UserModelError(
            f"{where}: its model in {path} cannot be loaded ({failed}), nor its weights into "
            f"the model {ref.function} builds ({_one_line(err)})"
        ) from None
    return model


@contextlib.contextmanager
def loading(reference: str, info=None, seed: int = 0):
    """Within it, every load of a saved model is :func:`load_saved`'s for ``reference``.

    What a task's evaluation loads (:func:`distrain.learning.predict.load_model`) is then
    loaded as the user's model must be, wherever the task asks for it.
    """
    token = predict.LOADER.set(lambda path: load_saved(path, reference, info, seed))
    try:
        yield
    finally:
        predict.LOADER.reset(token)


def check(text: str, info=None, seed: int = 0) -> None:
    """Fails fast on a bad user model: imports it, and builds it once when ``info`` is given.

    Raises:
        UserModelError: As :func:`build`.
    """
    ref = ModelReference.parse(text)
    if info is None:
        load_function(ref)
        return
    import tf_keras

    build(ref, info, seed)
    tf_keras.backend.clear_session()


def check_source(text: str, path: str | os.PathLike = "") -> None:
    """The cheap check, without importing anything: the reference, and its file compiles.

    A pipeline's parameter check runs it in an image that may lack TensorFlow; the
    training step then builds the model (:func:`check`).

    Args:
        text: The model reference.
        path: Where its file is (default: the reference's own path).

    Raises:
        UserModelError: A bad reference, a missing file, a syntax error (file and line).
    """
    ref = ModelReference.parse(text)
    if not ref.is_file:
        return
    file = Path(path or ref.where)
    if not file.is_file():
        raise UserModelError(f"{ref.where}: model file not found")
    try:
        compile(file.read_bytes(), str(file), "exec")
    except SyntaxError as err:
        raise UserModelError(f"{_where(err, str(file))}: {_one_line(err)}") from None


def stage(text: str, directory: str | os.PathLike, source: str | os.PathLike = "") -> str:
    """Copies the reference's file into ``directory``; returns the reference to the copy.

    How the user's file travels with a run: a pipeline's model artifact into the training
    step's output, a cluster run's into the shared volume every pod mounts.

    Args:
        text: The model reference (``FILE.py:FUNCTION[@TASK]``).
        directory: Where the copy goes (created).
        source: The file to copy (default: the reference's; a pipeline's artifact).

    Raises:
        UserModelError: The reference names a module, not a file, or the file is missing.
    """
    ref = ModelReference.parse(text)
    if not ref.is_file:
        raise UserModelError(
            f"model {text!r} names a module; a model file travels as FILE.py:FUNCTION"
        )
    source = Path(source or ref.where)
    if not source.is_file():
        raise UserModelError(f"{source}: model file not found")
    dest = Path(directory) / Path(ref.where).name
    dest.parent.mkdir(parents=True, exist_ok=True)
    if source.resolve() != dest.resolve():
        shutil.copyfile(source, dest)
    return ref.with_file(dest)


def resolve(model: str) -> str:
    """A model of the user's code imported (:func:`check`), its file's path made absolute.

    What ``distrain run`` does before its pipeline starts: steps run in other processes and
    folders. Built-in model names are returned as they are.

    Raises:
        UserModelError: As :func:`load_function`.
    """
    if not is_user_model(model):
        return model
    check(model)
    ref = ModelReference.parse(model)
    return ref.with_file(Path(ref.where).resolve()) if ref.is_file else model


def relocate(text: str, directory: str | os.PathLike) -> str:
    """The reference to the copy of its file in ``directory``, when the file itself is gone.

    A later step (the evaluation) sees the training step's output in another place, or
    another pod, than where the run read the file; its copy travels in that output
    (:func:`stage`). Any other reference is returned as it is.
    """
    if not is_user_model(text):
        return text
    ref = ModelReference.parse(text)
    copy = Path(directory) / Path(ref.where).name
    if ref.is_file and not Path(ref.where).is_file() and copy.is_file():
        return ref.with_file(copy)
    return text
