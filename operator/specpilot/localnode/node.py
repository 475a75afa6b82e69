"""The Node this agent is: its object, its status (capacity, conditions, node info) and its Lease,
registered and renewed as a kubelet does."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
from datetime import UTC, datetime

from kubernetes import client
from kubernetes.client.rest import ApiException

from specpilot.localnode.podspec import Json
from specpilot.localnode.runtime import now_iso

log = logging.getLogger("specpilot.localnode")

LEASE_SECONDS = 40
HEARTBEAT_SECONDS = 10
LEASE_NAMESPACE = "kube-node-lease"


def node_object(node: str) -> Json:
    """The Node as first created: its name and the labels a GPU node of this cluster carries."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node,
            "labels": {
                "kubernetes.io/hostname": node,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "nvidia.com/gpu.present": "true",
                "specpilot.io/local-node": "true",
            },
        },
    }


def node_status(args: argparse.Namespace, *, ready_since: str, kubelet_version: str) -> Json:
    """The Node's status: the advertised capacity, Ready since `ready_since` and no pressure, as of now."""
    alloc = {
        "cpu": str(args.cpus),
        "memory": args.memory,
        "pods": "110",
        "nvidia.com/gpu": str(args.gpus),
        "ephemeral-storage": "100Gi",
    }
    now = now_iso()
    ready = {
        "type": "Ready",
        "status": "True",
        "reason": "LocalNodeReady",
        "message": "specpilot local node agent is running",
        "lastHeartbeatTime": now,
        "lastTransitionTime": ready_since,
    }
    return {
        "capacity": alloc,
        "allocatable": alloc,
        "conditions": [ready]
        + [
            {
                "type": t,
                "status": "False",
                "reason": f"No{t}",
                "lastHeartbeatTime": now,
                "lastTransitionTime": ready_since,
            }
            for t in ("MemoryPressure", "DiskPressure", "PIDPressure")
        ],
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": args.node_name}],
        "nodeInfo": {
            "machineID": "specpilot-local",
            "systemUUID": "specpilot-local",
            "bootID": str(os.getpid()),
            "kernelVersion": os.uname().release,
            "osImage": "specpilot local node",
            "containerRuntimeVersion": "local://processes",
            "kubeletVersion": kubelet_version,
            "kubeProxyVersion": "",
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
    }


def node_lease(node: str, node_uid: str, renewed: datetime) -> Json:
    """A new Lease for the Node, owned by it, so it goes with the Node."""
    owner = {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid}
    return {
        "metadata": {"name": node, "ownerReferences": [owner]},
        "spec": {"holderIdentity": node, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": renewed},
    }


class NodeHeartbeat:
    """Registers the Node, then renews its Lease and refreshes its status, as a kubelet does."""

    def __init__(self, args: argparse.Namespace, core: client.CoreV1Api, coord: client.CoordinationV1Api) -> None:
        self.args = args
        self.core = core
        self.coord = coord
        self.node = args.node_name
        self._ready_since = ""
        self._version = ""

    def status(self) -> Json:
        return node_status(self.args, ready_since=self._ready_since, kubelet_version=self._version)

    def register(self) -> None:
        self._ready_since = now_iso()
        self._version = client.VersionApi(self.core.api_client).get_code().git_version
        with contextlib.suppress(ApiException):
            self.core.create_node(node_object(self.node))
        self.core.patch_node_status(self.node, {"status": self.status()})
        log.info("node %s registered with %s nvidia.com/gpu", self.node, self.args.gpus)

    def beat(self) -> None:
        """Renew the Lease and refresh the Ready condition."""
        now = datetime.now(UTC)
        try:
            lease = self.coord.read_namespaced_lease(self.node, LEASE_NAMESPACE)
            lease.spec.renew_time = now
            lease.spec.holder_identity = self.node
            self.coord.replace_namespaced_lease(self.node, LEASE_NAMESPACE, lease)
        except ApiException as exc:
            if exc.status != 404:
                raise
            uid = self.core.read_node(self.node).metadata.uid
            self.coord.create_namespaced_lease(LEASE_NAMESPACE, node_lease(self.node, uid, now))
        self.core.patch_node_status(self.node, {"status": self.status()})

    async def run(self) -> None:
        """Beat every HEARTBEAT_SECONDS until cancelled; a failed beat is logged and the next one tried."""
        while True:
            try:
                await asyncio.to_thread(self.beat)
            except Exception as exc:
                log.warning("heartbeat failed: %s", exc)
            await asyncio.sleep(HEARTBEAT_SECONDS)
