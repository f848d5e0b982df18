"""A fake Kubernetes cluster for the launcher's tests (units/test_k8s_launcher.py, faults/).

The fakes subclass the Kubernetes client's own API classes and override only the methods
the launcher calls (with the real signatures; a method the launcher calls but the fakes
lack would reach the real client and fail), returning the client's own model objects.
"""

from kubernetes import client

from distrain.k8s.api import KubeApi
from distrain.k8s.objects import ROLE_LABEL, RUN_LABEL
from distrain.k8s.train import RUN_KEY_LABEL


class FakeCluster:
    """Objects by (kind, name) and a script of pod states, one step per poll."""

    def __init__(self, script, fail_create_at=None):
        self.objects = {}
        self.script = script  # callable(cluster, poll) -> None, mutates pods/status
        self.pods = {}
        self.logs = {}
        self.polls = 0
        self.fail_create_at = fail_create_at
        self.creates = 0
        self.job_status = {}  # job name -> V1JobStatus
        self.mpijob_conditions = []  # conditions of the MPIJob or TrainJob
        self.events = []  # CoreV1Event
        self.failures = {}  # method name -> exceptions to raise, in order, before answering

    def add(self, kind, body):
        self.creates += 1
        if self.fail_create_at == self.creates:
            raise client.ApiException(status=403, reason="Forbidden")
        name = body["metadata"]["name"]
        assert (kind, name) not in self.objects, f"{kind}/{name} created twice"
        self.objects[(kind, name)] = body

    def remove(self, kind, name):
        if (kind, name) not in self.objects:
            raise client.ApiException(status=404, reason="NotFound")
        del self.objects[(kind, name)]
        # Deleting a job deletes its pods (background propagation).
        for pod_name in [p for p, pod in self.pods.items() if pod.metadata.name.startswith(name)]:
            del self.pods[pod_name]

    @staticmethod
    def matches(obj, selector):
        """Whether an object (a body, or a client model's metadata) has the label."""
        label, value = selector.split("=")
        meta = obj["metadata"] if isinstance(obj, dict) else obj.metadata
        labels = (meta.get("labels") if isinstance(meta, dict) else meta.labels) or {}
        return labels.get(label) == value

    def listed(self, kind, selector):
        """Names of the objects of a kind that carry the label ``selector``."""
        return [
            n for (k, n), body in self.objects.items() if k == kind and self.matches(body, selector)
        ]

    def fail(self, method):
        """Raises the next scripted failure of ``method``, if any."""
        queue = self.failures.get(method)
        if queue:
            raise queue.pop(0)

    def pod(self, name, role, phase, terminated=None, waiting=None, labels=None, conditions=None):
        state = client.V1ContainerState(terminated=terminated, waiting=waiting)
        status = client.V1ContainerStatus(
            name="c", image="i", image_id="", ready=phase == "Running", restart_count=0, state=state
        )
        self.pods[name] = client.V1Pod(
            metadata=client.V1ObjectMeta(
                name=name,
                labels={RUN_LABEL: self.run_name, ROLE_LABEL: role, **(labels or {})},
            ),
            status=client.V1PodStatus(
                phase=phase, container_statuses=[status], conditions=conditions
            ),
        )

    def event(self, kind, name, reason, message, type_="Warning"):
        self.events.append(
            client.CoreV1Event(
                metadata=client.V1ObjectMeta(name=f"{name}.{len(self.events)}"),
                involved_object=client.V1ObjectReference(kind=kind, name=name),
                reason=reason,
                message=message,
                type=type_,
            )
        )


class FakeLogStream:
    """What ``read_namespaced_pod_log(follow=True, _preload_content=False)`` returns: a
    urllib3 response whose ``stream`` yields bytes (here in chunks that split lines)."""

    def __init__(self, text):
        self.data = text.encode()
        self.released = False

    def stream(self, amt=None, decode_content=None):
        for i in range(0, len(self.data), 7):
            yield self.data[i : i + 7]

    def release_conn(self):
        self.released = True


class FakeCore(client.CoreV1Api):
    def __init__(self, cluster):  # no api_client: anything not faked fails loudly
        self.cluster = cluster

    def create_namespaced_service(self, namespace, body, **kwargs):
        self.cluster.add("Service", body)

    def delete_namespaced_service(self, name, namespace, **kwargs):
        self.cluster.remove("Service", name)

    def list_namespaced_pod(self, namespace, **kwargs):
        c = self.cluster
        selector = kwargs["label_selector"]
        if selector.startswith(f"{RUN_KEY_LABEL}="):  # an earlier attempt's pods
            return client.V1PodList(items=[p for p in c.pods.values() if c.matches(p, selector)])
        assert selector == f"{RUN_LABEL}={c.run_name}"
        c.fail("list_namespaced_pod")
        c.polls += 1
        c.script(c, c.polls)
        return client.V1PodList(items=list(c.pods.values()))

    def list_namespaced_service(self, namespace, **kwargs):
        found = self.cluster.listed("Service", kwargs["label_selector"])
        return client.V1ServiceList(
            items=[client.V1Service(metadata=client.V1ObjectMeta(name=n)) for n in found]
        )

    def read_namespaced_pod_log(self, name, namespace, **kwargs):
        # The launcher follows logs as streams, never re-reading them whole.
        assert kwargs.get("follow") is True and kwargs.get("_preload_content") is False
        if name not in self.cluster.pods:
            raise client.ApiException(status=404, reason="NotFound")
        return FakeLogStream(self.cluster.logs.get(name, ""))

    def list_namespaced_event(self, namespace, **kwargs):
        self.cluster.fail("list_namespaced_event")
        # The launcher asks the server for warning events only (a busy namespace's normal
        # events are most of them); the fake filters as the server does.
        assert kwargs.get("field_selector") == "type=Warning", kwargs
        events = [e for e in self.cluster.events if e.type == "Warning"]
        return client.CoreV1EventList(items=events)


class FakeBatch(client.BatchV1Api):
    def __init__(self, cluster):
        self.cluster = cluster

    def create_namespaced_job(self, namespace, body, **kwargs):
        self.cluster.add("Job", body)

    def delete_namespaced_job(self, name, namespace, **kwargs):
        assert kwargs.get("propagation_policy") == "Background"
        self.cluster.remove("Job", name)

    def list_namespaced_job(self, namespace, **kwargs):
        found = self.cluster.listed("Job", kwargs["label_selector"])
        return client.V1JobList(
            items=[client.V1Job(metadata=client.V1ObjectMeta(name=n)) for n in found]
        )

    def read_namespaced_job_status(self, name, namespace, **kwargs):
        status = self.cluster.job_status.get(name, client.V1JobStatus())
        return client.V1Job(metadata=client.V1ObjectMeta(name=name), status=status)


CUSTOM = {
    ("kubeflow.org", "v2beta1", "mpijobs"): "MPIJob",
    ("trainer.kubeflow.org", "v1alpha1", "trainjobs"): "TrainJob",
}


class FakeCustom(client.CustomObjectsApi):
    def __init__(self, cluster):
        self.cluster = cluster

    def create_namespaced_custom_object(self, group, version, namespace, plural, body, **kw):
        kind = CUSTOM[(group, version, plural)]
        assert body["kind"] == kind
        self.cluster.fail("create_namespaced_custom_object")
        self.cluster.add(kind, body)

    def get_namespaced_custom_object(self, group, version, namespace, plural, name, **kw):
        body = self.cluster.objects[(CUSTOM[(group, version, plural)], name)]
        return {**body, "status": {"conditions": self.cluster.mpijob_conditions}}

    def list_namespaced_custom_object(self, group, version, namespace, plural, **kw):
        kind = CUSTOM[(group, version, plural)]
        found = self.cluster.listed(kind, kw["label_selector"])
        return {"items": [self.cluster.objects[(kind, n)] for n in found]}

    def delete_namespaced_custom_object(self, group, version, namespace, plural, name, **kw):
        assert kw.get("propagation_policy") == "Background"
        self.cluster.remove(CUSTOM[(group, version, plural)], name)


class FakeNetworking(client.NetworkingV1Api):
    def __init__(self, cluster):
        self.cluster = cluster

    def create_namespaced_network_policy(self, namespace, body, **kwargs):
        self.cluster.add("NetworkPolicy", body)

    def delete_namespaced_network_policy(self, name, namespace, **kwargs):
        self.cluster.remove("NetworkPolicy", name)

    def list_namespaced_network_policy(self, namespace, **kwargs):
        found = self.cluster.listed("NetworkPolicy", kwargs["label_selector"])
        return client.V1NetworkPolicyList(
            items=[client.V1NetworkPolicy(metadata=client.V1ObjectMeta(name=n)) for n in found]
        )


def _api(cluster):
    return KubeApi(
        FakeCore(cluster), FakeBatch(cluster), FakeCustom(cluster), FakeNetworking(cluster)
    )


def _terminated(code, reason):
    return client.V1ContainerStateTerminated(exit_code=code, reason=reason)
