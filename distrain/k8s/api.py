"""The Kubernetes API as distrain calls it: the clients and their request timeouts.

Every call carries a request timeout (:class:`TimedClient`); the answers worth another
try (429, a 5xx, a broken connection) are retried with backoff (:class:`ApiCaller`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from distrain.k8s.config import request_timeout

# API answers worth another try: throttled, or the server (or a proxy) failing for a moment.
TRANSIENT_STATUSES = {429, 500, 502, 503, 504}


class TimedClient:
    """One Kubernetes client whose every call carries ``_request_timeout``.

    The generated client waits for ever on a server that accepted the connection but does
    not answer (no timeout is its default); every method takes ``_request_timeout``
    (an int, or a ``(connect, read)`` pair). A call that names its own keeps it.
    """

    def __init__(self, client: Any, seconds: float):
        self._client, self._timeout = client, request_timeout(seconds)

    def __getattr__(self, name: str):
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr

        def call(*args, **kwargs):
            kwargs.setdefault("_request_timeout", self._timeout)
            return attr(*args, **kwargs)

        return call


@dataclass
class KubeApi:
    """The four Kubernetes client APIs the launcher uses."""

    core: Any
    batch: Any
    custom: Any
    networking: Any

    @classmethod
    def from_environment(cls) -> KubeApi:
        """Clients for the cluster this process runs in, else the local kubeconfig."""
        from kubernetes import client, config

        try:
            config.load_incluster_config()
        except config.ConfigException:
            config.load_kube_config()
        return cls(
            client.CoreV1Api(),
            client.BatchV1Api(),
            client.CustomObjectsApi(),
            client.NetworkingV1Api(),
        )

    def timed(self, seconds: float) -> KubeApi:
        """The same APIs, every call bounded by a request timeout of ``seconds``."""
        bare = [c._client if isinstance(c, TimedClient) else c for c in self.clients()]
        return KubeApi(*(TimedClient(c, seconds) for c in bare))

    def clients(self) -> tuple:
        """The four clients, in field order."""
        return (self.core, self.batch, self.custom, self.networking)


def not_found(err: Exception) -> bool:
    """Whether an API error is a 404 (the object is gone)."""
    return getattr(err, "status", None) == 404


def transient(err: BaseException) -> bool:
    """Whether an API error is worth retrying: 429, a 5xx, or a broken connection."""
    import urllib3

    if getattr(err, "status", None) in TRANSIENT_STATUSES:
        return True
    return isinstance(err, (ConnectionError, TimeoutError, urllib3.exceptions.HTTPError))


@dataclass
class ApiCaller:
    """Calls the Kubernetes API, retrying transient failures with exponential backoff."""

    attempts: int = 5
    first_backoff: float = 1.0
    max_backoff: float = 30.0
    sleep: Callable[[float], None] = time.sleep
    say: Callable[[str], None] = print

    def __call__(self, what: str, fn: Callable, *args, **kwargs):
        backoff = self.first_backoff
        for attempt in range(1, self.attempts + 1):
            try:
                return fn(*args, **kwargs)
            except Exception as err:  # noqa: BLE001 (only transient errors are retried)
                if attempt == self.attempts or not transient(err):
                    raise
                reason = getattr(err, "status", None) or type(err).__name__
                self.say(
                    f"{what}: transient API error ({reason}), attempt {attempt} of "
                    f"{self.attempts}; retrying in {backoff:.0f} s"
                )
                self.sleep(backoff)
                backoff = min(self.max_backoff, backoff * 2)
        raise AssertionError("unreachable")
