"""Which connections a set of NetworkPolicies admits: Kubernetes' rules, for the tests.

A connection from one peer to another on a port is admitted when both ends allow it: the
source pod's egress (if any policy of its namespace selects it for ``Egress``, one of their
egress rules must match the destination and port) and the destination pod's ingress (the
same with ``Ingress`` rules and the source). A pod no policy selects for a direction is open
in that direction; policies add up (any rule of any selecting policy suffices). A peer
outside the cluster's pods (the API server's address, a metadata endpoint, the internet) is
an :class:`Address`: only an ``ipBlock`` matches it, and it has no policies of its own.

Written from the API reference (networking.k8s.io/v1 NetworkPolicy): an empty selector
selects everything, a peer with both ``namespaceSelector`` and ``podSelector`` is their
intersection, a peer with only ``podSelector`` means the policy's own namespace, missing
``from``/``to`` or ``ports`` match every source or port, ``policyTypes`` defaults to
``Ingress`` plus ``Egress`` when the policy has egress rules.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Pod:
    """A pod: its namespace and labels."""

    namespace: str
    labels: dict = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class Address:
    """An address that is not a pod (the API server, 169.254.169.254, the internet)."""

    ip: str


def selects(selector: dict | None, labels: dict) -> bool:
    """Whether a label selector (matchLabels, matchExpressions) matches ``labels``."""
    selector = selector or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]
        if not ok:
            return False
    return True


def _namespace_labels(namespace: str) -> dict:
    # The API server sets this label on every namespace (Kubernetes >= 1.22).
    return {"kubernetes.io/metadata.name": namespace}


def _peer_matches(peer: dict, policy_namespace: str, other: Pod | Address) -> bool:
    if "ipBlock" in peer:
        if not isinstance(other, Address):
            return False  # pod IPs in ipBlocks are left to the plugin; the tests use none
        ip = ipaddress.ip_address(other.ip)
        block = peer["ipBlock"]
        inside = ip in ipaddress.ip_network(block["cidr"])
        return inside and not any(ip in ipaddress.ip_network(c) for c in block.get("except", []))
    if not isinstance(other, Pod):
        return False
    if "namespaceSelector" in peer:
        if not selects(peer["namespaceSelector"], _namespace_labels(other.namespace)):
            return False
    elif other.namespace != policy_namespace:
        return False
    return selects(peer.get("podSelector"), other.labels)


def _port_matches(ports: list | None, port: int, protocol: str) -> bool:
    if not ports:
        return True
    for entry in ports:
        if entry.get("protocol", "TCP") != protocol:
            continue
        first = entry.get("port")
        if first is None:
            return True
        last = entry.get("endPort", first)
        if isinstance(first, int) and first <= port <= last:
            return True
    return False


def _types(policy: dict) -> list[str]:
    spec = policy["spec"]
    return spec.get("policyTypes") or ["Ingress", *(["Egress"] if "egress" in spec else [])]


def _allows(policies, pod: Pod, other, port: int, protocol: str, direction: str) -> bool:
    """Whether ``pod``'s policies let it take (Ingress) or open (Egress) this connection."""
    key, peers = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
    selecting = [
        p
        for p in policies
        if p["metadata"]["namespace"] == pod.namespace
        and direction in _types(p)
        and selects(p["spec"]["podSelector"], pod.labels)
    ]
    if not selecting:
        return True
    for policy in selecting:
        for rule in policy["spec"].get(key) or []:
            found = rule.get(peers)
            sources = not found or any(
                _peer_matches(peer, policy["metadata"]["namespace"], other) for peer in found
            )
            if sources and _port_matches(rule.get("ports"), port, protocol):
                return True
    return False


def admitted(
    policies: list[dict], source: Pod, destination: Pod | Address, port: int, protocol="TCP"
) -> bool:
    """Whether ``source`` may open a connection to ``destination`` on ``port``."""
    if not _allows(policies, source, destination, port, protocol, "Egress"):
        return False
    if isinstance(destination, Pod):
        return _allows(policies, destination, source, port, protocol, "Ingress")
    return True
