"""Kopf wiring: which watches feed the operator and which handler calls which controller method.

One daemon per pilot runs its reconcile loop, with its measuring and probing loops beside it
(`schedule`): at once when the pilot or one of its children or pods
changes (so edits and deletions are put back within seconds), and at least once per analysis
interval, which keeps the routing table fresh. Children and pods are watched through
Kopf indices, selected server-side by the `specpilot.io/pilot` label, so a reconcile reads no
object from the API server. Deletion runs the ordered teardown behind a finalizer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Mapping
from typing import Any

import aiohttp
import kopf

from specpilot.api.pilot import GROUP, PLURAL, VERSION
from specpilot.controller.core.observe import ChildSummary, PodView, pod_view, summarize
from specpilot.controller.core.progress import ACTED_ON
from specpilot.controller.core.snapshot import Observation
from specpilot.controller.gather import pilot_ref
from specpilot.controller.kube import ApiError
from specpilot.controller.reconcile import Controller
from specpilot.controller.schedule import RETRY_SECONDS, first, repeat
from specpilot.kubeaccess import Credentials
from specpilot.wire.names import PILOT_LABEL

log = logging.getLogger("specpilot.operator")

FINALIZER = f"{GROUP}/teardown"
# (group, version, plural) of every kind a pilot owns; one index each.
CHILD_RESOURCES = (
    ("", "v1", "serviceaccounts"),
    ("", "v1", "configmaps"),
    ("", "v1", "services"),
    ("apps", "v1", "deployments"),
    ("batch", "v1", "jobs"),
    ("rbac.authorization.k8s.io", "v1", "roles"),
    ("rbac.authorization.k8s.io", "v1", "rolebindings"),
)
OWNED = {PILOT_LABEL: kopf.PRESENT}
PODS_INDEX = "pilot_pods"
WAKE_GATHER_SECONDS = 1.0


def _index_name(plural: str) -> str:
    return f"pilot_{plural}"


def settings(*, peering: bool) -> kopf.OperatorSettings:
    """Kopf settings: server-side selection of children, no generic Events, state in annotations."""
    out = kopf.OperatorSettings()
    for group, version, plural in (*CHILD_RESOURCES, ("", "v1", "pods")):
        out.watching.label_selectors[(group, plural) if group else (version, plural)] = PILOT_LABEL
    out.persistence.finalizer = FINALIZER
    out.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    out.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=GROUP)
    # Kopf would post an Event for every handler run ("Handler ... succeeded"); the operator posts its
    # own, one per real transition, so only Kopf's warnings and errors become Events.
    out.posting.level = logging.WARNING
    out.watching.server_timeout = 300
    out.peering.standalone = not peering
    out.peering.mandatory = peering
    out.peering.lifetime = 30  # a standby takes over within about this long after the active one dies
    return out


def _observation(body: Mapping[str, Any], indices: Mapping[str, Any]) -> Observation:
    meta = body["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    key = (namespace, name)
    children: dict[tuple[str, str], ChildSummary] = {}
    for _, _, plural in CHILD_RESOURCES:
        for child in indices[_index_name(plural)].get(key, ()):
            children[(child.kind, child.name)] = child
    pods: Iterable[PodView] = indices[PODS_INDEX].get(key, ())
    return Observation(children=children, pods=tuple(pods), annotations=dict(meta.get("annotations") or {}))


def connection_info(credentials: Credentials) -> kopf.ConnectionInfo:
    """Kopf's connection from the operator's renewing credentials, expiring when they are due."""
    cfg, renew_at = credentials.current()
    scheme, _, token = (credentials.token() or "").partition(" ")  # "Bearer x", or the in-cluster "bearer x"
    return kopf.ConnectionInfo(
        server=str(cfg.host).rstrip("/"),
        ca_path=cfg.ssl_ca_cert,
        insecure=not cfg.verify_ssl,
        scheme=scheme or None,
        token=token or None,
        certificate_path=cfg.cert_file,
        private_key_path=cfg.key_file,
        expiration=renew_at,
    )


def register(registry: kopf.OperatorRegistry, controller: Controller, credentials: Credentials | None = None) -> None:
    """Register every handler on `registry`, bound to `controller` (no module-level state); Kopf logs in
    with `credentials` where given, again when they are due for renewal or after a 401."""

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        if credentials is None:
            return kopf.login_via_client(**kwargs)
        return connection_info(credentials)

    _watch_children(registry, controller)

    @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry)
    def pilot_changed(**kwargs: Any) -> None:
        # The operator's own status writes come back as events too; only a new generation matters, or
        # an SRE's manual action.
        meta = kwargs["meta"]
        manual = any(key in ACTED_ON for key in meta.get("annotations") or {})
        controller.wake_for_spec(kwargs["namespace"], kwargs["name"], int(meta.get("generation") or 0), manual)

    @kopf.daemon(GROUP, VERSION, PLURAL, registry=registry, cancellation_timeout=30.0)
    async def pilot_loop(body: kopf.Body, stopped: kopf.DaemonStopped, **kwargs: Any) -> None:
        ref = pilot_ref(body)
        name = f"{ref.namespace}/{ref.name}"
        # Measuring and probing apart from reconciles and from each other: a probe round held up by a
        # slow webhook never delays a collection.
        loops = [
            asyncio.create_task(repeat(step, stopped, what=f"{name}: {what}"), name=f"{what} {name}")
            for what, step in (
                ("measuring", lambda: controller.collect(body, _observation(body, kwargs))),
                ("probing", lambda: controller.probe(body, _observation(body, kwargs))),
            )
        ]
        try:
            await _reconcile_loop(controller, body, stopped, kwargs)
        finally:
            for loop in loops:
                loop.cancel()

    @kopf.on.delete(GROUP, VERSION, PLURAL, registry=registry)
    async def pilot_deleted(body: kopf.Body, **kwargs: Any) -> None:
        if not await controller.teardown(body, _observation(body, kwargs)):
            raise kopf.TemporaryError("waiting for the router's pods to go; the baseline serves until then", delay=1)


def _watch_children(registry: kopf.OperatorRegistry, controller: Controller) -> None:
    """Index the pilots' children and pods, which each tick observes, and wake a pilot when one changes."""

    def index_child(**kwargs: Any) -> Any:
        return {(kwargs["namespace"], kwargs["labels"][PILOT_LABEL]): summarize(kwargs["body"])}

    def index_pod(**kwargs: Any) -> Any:
        return {(kwargs["namespace"], kwargs["labels"][PILOT_LABEL]): pod_view(kwargs["body"])}

    for group, version, plural in CHILD_RESOURCES:
        kopf.index(group, version, plural, labels=OWNED, id=_index_name(plural), registry=registry)(index_child)
    kopf.index("", "v1", "pods", labels=OWNED, id=PODS_INDEX, registry=registry)(index_pod)

    def child_changed(**kwargs: Any) -> None:
        controller.wake(kwargs["namespace"], kwargs["labels"][PILOT_LABEL])

    # Not the routing ConfigMap: the operator rewrites it every interval, and each rewrite would wake
    # it again; an edit to it is undone by the next rewrite.
    for group, version, plural in (*CHILD_RESOURCES, ("", "v1", "pods")):
        if plural != "configmaps":
            kopf.on.event(group, version, plural, labels=OWNED, id=f"wake_on_{plural}", registry=registry)(
                child_changed
            )


async def _reconcile_loop(
    controller: Controller, body: kopf.Body, stopped: kopf.DaemonStopped, kwargs: Mapping[str, Any]
) -> None:
    """The pilot's reconciles, each when the last one's delay is up or something wakes it."""
    ref = pilot_ref(body)
    wakeup = controller.memory(ref).wakeup
    while not stopped:
        wakeup.clear()
        try:
            delay = await controller.reconcile(body, _observation(body, kwargs))
        except (ApiError, aiohttp.ClientError, TimeoutError) as error:
            log.warning("%s/%s: reconcile failed, retrying: %s", ref.namespace, ref.name, error)
            delay = RETRY_SECONDS
        except Exception:
            # A bug must not stop the pilot's loop: say so loudly, count it, and look again.
            log.exception("%s/%s: reconcile failed unexpectedly, retrying", ref.namespace, ref.name)
            delay = RETRY_SECONDS
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(delay):
                await first(wakeup.wait(), stopped.wait())
            # A rollout or a pilot being created changes many objects at once: gather them. A
            # due window is judged at once: its flip, if any, should not wait.
            if not wakeup.urgent:
                await first(asyncio.sleep(WAKE_GATHER_SECONDS), stopped.wait())
