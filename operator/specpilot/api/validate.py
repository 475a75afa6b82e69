"""The operator's judge of a SpeculationPilot: which fields are wrong, and why.

The API server already refuses what the CRD's schema and CEL rules can say; this repeats those rules in
Python with the same messages (so that an object stored before a CRD upgrade, or on a server that
skipped a rule, is still caught) and adds what only the operator can judge. A non-empty answer becomes
an `InvalidSpec` condition, and nothing is deployed.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from pydantic import ValidationError

from specpilot.api.common import Rule
from specpilot.api.pilot import NAME_LEAVES_REHEARSAL, NAME_MAX_LENGTH, NAME_PATTERN, NAME_RULE
from specpilot.api.podsecurity import annotation_refusals, container_refusals, context_refusals, volume_refusals
from specpilot.api.spec.analysis_spec import ONE_FORECAST_PROFILE, WINDOW_COVERS_INTERVAL, WINDOW_COVERS_KV_CACHE
from specpilot.api.spec.arms_spec import (
    DRAFT_MODEL_FORBIDDEN,
    DRAFT_MODEL_REQUIRED,
    DRAFT_REVISION_NEEDS_MODEL,
    METHODS_WITH_DRAFT_MODEL,
    METHODS_WITHOUT_DRAFT_MODEL,
    SCHEDULE_ASCENDS,
    SCHEDULE_WITHIN_DRAFT,
)
from specpilot.api.spec.engine_spec import (
    ENV_VALUE_OR_SOURCE,
    GPU_PER_RANK,
    GPU_RESOURCE,
    TOKEN_NEEDS_OPT_IN,
    TOLERATION_EXISTS_WITHOUT_VALUE,
    Engine,
    PodTemplate,
    TolerationOperator,
)
from specpilot.api.spec.pilot_spec import (
    ACCEPTANCE_LENGTH_REACHABLE,
    ALTERNATIVE_DIFFERS,
    ALTERNATIVE_GPU_BUDGET,
    ALTERNATIVE_NEEDS_CONTROL,
    ALTERNATIVE_SHARE_FITS,
    CONTROL_LABELS_GIVEN,
    DEADLINE_WITHIN_TIMEOUT,
    DEFAULT_SCOPE_EXISTS,
    DRAFT_TENSOR_PARALLEL,
    ONE_ENGINE_SOURCE,
    PROBES_GIVEN,
    REHEARSAL_FITS_CAP,
    REHEARSAL_NEEDS_CONTROL,
    REHEARSAL_STEP_SPANS_WINDOW,
    SCOPE_PROBES_NEED_PROBES,
    STAGE_SPANS_INTERVAL,
    STAGE_SPANS_SAMPLES,
    WORKLOAD_KEEPS_ITS_SIZE,
    WORKLOAD_WITHOUT_ALTERNATIVE,
    SpeculationPilotSpec,
)
from specpilot.api.spec.probes_spec import (
    MIN_TOKENS_WITHIN_MAX,
    ONE_SCORE_SOURCE,
    SAMPLED_CASE_HAS_SCORE,
    SAMPLED_CASE_HAS_TEMPERATURE,
    SCORE_ONLY_SAMPLED,
    STRUCTURED_CASE_HAS_SCHEMA,
    TEMPERATURE_ONLY_SAMPLED,
    TOOL_CASE_HAS_TOOLS,
    TOOL_CHOICE_KNOWN,
    ProbeCase,
    ProbeKind,
    ScoreWebhook,
)
from specpilot.api.spec.prometheus_spec import ARM_LABELS_DIFFER, ONE_PROMETHEUS
from specpilot.api.spec.quality_spec import Webhook
from specpilot.api.spec.rehearsal_spec import PEAK_ONE_SOURCE
from specpilot.api.spec.scopes_spec import HeaderMatchType, ScopeMatch
from specpilot.api.spec.secretref import HEADER_NOT_RESERVED, RESERVED_HEADERS
from specpilot.api.spec.spec_fields import URL_WITHOUT_USERINFO
from specpilot.wire import batchschedule
from specpilot.wire.names import REHEARSAL_SUFFIX, owned_names, rehearsal_pilot, router_name


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a spec, naming the field as the API server would (`spec.scopes[1].name`)."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


def validate(body: Mapping[str, Any]) -> list[Problem]:
    """Judge a SpeculationPilot object as the API server returns it; an empty list means deployable."""
    name = body.get("metadata", {}).get("name")
    problems = list(_name_problems(name))
    try:
        spec = SpeculationPilotSpec.from_wire(body.get("spec"))
    except ValidationError as error:
        return problems + [Problem(_field_path(("spec", *e["loc"])), e["msg"]) for e in error.errors()]
    if isinstance(name, str):
        problems += _owned_problems(name, spec)
    return problems + check_spec(spec)


def _owned_problems(name: str, spec: SpeculationPilotSpec) -> Iterator[Problem]:
    """Fields that name an object the operator makes for the pilot `name`."""
    ref = spec.workload_ref
    if ref is not None and ref.name in owned_names(name):
        yield Problem(
            "spec.workloadRef.name",
            f"{ref.name} is a name the operator gives a Deployment of this pilot, and deletes with it: "
            "rename the pilot",
        )
    template = spec.engine.pod_template if spec.engine is not None else None
    account = template.service_account_name if template is not None else None
    if account is not None and account in (router_name(name), router_name(rehearsal_pilot(name))):
        yield Problem(
            "spec.engine.podTemplate.serviceAccountName",
            f"{account} is the ServiceAccount the operator makes for this pilot's router: name a ServiceAccount "
            "made for the engine, or leave the field unset",
        )
    taken = spec.router.takeover
    if taken is not None and taken.service in owned_names(name):
        yield Problem(
            "spec.router.takeover.service",
            f"{taken.service} is a Service the operator makes for this pilot: name the Service clients use",
        )


def check_spec(spec: SpeculationPilotSpec) -> list[Problem]:
    """The rules that relate several fields of a parsed spec."""
    return [
        *_source_problems(spec),
        *(_engine_problems(spec.engine) if spec.engine is not None else ()),
        *_arm_problems(spec),
        *_schedule_problems(spec),
        *_scope_problems(spec),
        *_analysis_problems(spec),
        *_rehearsal_problems(spec),
        *_unique("spec.quality.webhooks", [webhook.name for webhook in spec.quality.webhooks]),
        *_probe_problems(spec),
        *_call_problems(spec),
    ]


def _call_problems(spec: SpeculationPilotSpec) -> Iterator[Problem]:
    """URLs without credentials in them, and secret headers the operator does not set itself."""
    hooks: list[tuple[str, Webhook | ScoreWebhook]] = [
        (f"spec.quality.webhooks[{i}]", hook) for i, hook in enumerate(spec.quality.webhooks)
    ]
    hooks += [
        (f"{field}.score.webhook", case.score.webhook)
        for field, case in listed_cases(spec)
        if case.score is not None and case.score.webhook is not None
    ]
    source = spec.analysis.metrics_source
    urls = [(f"{field}.url", hook.url) for field, hook in hooks]
    if source is not None and source.prometheus.url is not None:
        urls.append(("spec.analysis.metricsSource.prometheus.url", source.prometheus.url))
    for field, url in urls:
        if "@" in urlsplit(url).netloc:
            yield _problem(field, URL_WITHOUT_USERINFO)
    for field, hook in hooks:
        if hook.secret_header is not None and hook.secret_header.name.lower() in RESERVED_HEADERS:
            yield _problem(f"{field}.secretHeader.name", HEADER_NOT_RESERVED)


def _probe_problems(spec: SpeculationPilotSpec) -> Iterator[Problem]:
    probes = spec.quality.probes
    own = all(scope.probes is not None for scope in spec.scopes)
    if probes is not None and not probes.prompts and not probes.cases and not own:
        yield _problem("spec.quality.probes", PROBES_GIVEN)
    if probes is None and any(scope.probes is not None for scope in spec.scopes):
        yield _problem("spec.quality.probes", SCOPE_PROBES_NEED_PROBES)
    for field, case in listed_cases(spec):
        yield from _case_problems(field, case)


def listed_cases(spec: SpeculationPilotSpec) -> list[tuple[str, ProbeCase]]:
    """Every probe case as written, named by its field: quality.probes' cases, then each scope's."""
    probes = spec.quality.probes
    listed = [(f"spec.quality.probes.cases[{i}]", case) for i, case in enumerate(probes.cases if probes else ())]
    for s, scope in enumerate(spec.scopes):
        cases = scope.probes.cases if scope.probes is not None else ()
        listed += [(f"spec.scopes[{s}].probes.cases[{i}]", case) for i, case in enumerate(cases)]
    return listed


def _case_problems(field: str, case: ProbeCase) -> Iterator[Problem]:
    names = {tool.name for tool in case.tools}
    if case.kind is ProbeKind.TOOL_CALL and not case.tools:
        yield _problem(field + ".tools", TOOL_CASE_HAS_TOOLS)
    if case.kind is ProbeKind.TOOL_CALL and case.tool_choice not in {"auto", "required", *names}:
        yield _problem(field + ".toolChoice", TOOL_CHOICE_KNOWN)
    if case.kind is ProbeKind.STRUCTURED and case.json_schema is None:
        yield _problem(field + ".jsonSchema", STRUCTURED_CASE_HAS_SCHEMA)
    if case.max_tokens is not None and case.min_tokens > case.max_tokens:
        yield _problem(field + ".minTokens", MIN_TOKENS_WITHIN_MAX)
    sampled = case.kind is ProbeKind.SAMPLED
    if sampled and case.temperature is None:
        yield _problem(field + ".temperature", SAMPLED_CASE_HAS_TEMPERATURE)
    if not sampled and case.temperature is not None:
        yield _problem(field + ".temperature", TEMPERATURE_ONLY_SAMPLED)
    if sampled and case.score is None:
        yield _problem(field + ".score", SAMPLED_CASE_HAS_SCORE)
    if not sampled and case.score is not None:
        yield _problem(field + ".score", SCORE_ONLY_SAMPLED)
    if case.score is not None and (case.score.builtin is None) == (case.score.webhook is None):
        yield _problem(field + ".score", ONE_SCORE_SOURCE)


def _field_path(loc: Sequence[int | str]) -> str:
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc).lstrip(".")


def _problem(field: str, rule: Rule) -> Problem:
    return Problem(field, rule.message)


def _name_problems(name: object) -> Iterator[Problem]:
    if not isinstance(name, str):
        return
    if len(name) > NAME_MAX_LENGTH or not re.fullmatch(NAME_PATTERN, name):
        yield Problem("metadata.name", NAME_RULE.message)
    elif name.endswith(REHEARSAL_SUFFIX):
        yield Problem("metadata.name", NAME_LEAVES_REHEARSAL.message)


def _unique(field: str, names: Sequence[str]) -> Iterator[Problem]:
    for index, name in enumerate(names):
        if name in names[:index]:
            yield Problem(f"{field}[{index}]", f"duplicate name {name!r}")


def _source_problems(spec: SpeculationPilotSpec) -> Iterator[Problem]:
    """Exactly one of spec.engine and spec.workloadRef, and with a workload nothing that would resize it
    or change its flags."""
    if (spec.engine is None) == (spec.workload_ref is None):
        yield _problem("spec.engine", ONE_ENGINE_SOURCE)
    if spec.workload_ref is None:
        return
    if spec.baseline.replicas != 1:
        yield _problem("spec.baseline.replicas", WORKLOAD_KEEPS_ITS_SIZE)
    if spec.alternative is not None:
        yield _problem("spec.alternative", WORKLOAD_WITHOUT_ALTERNATIVE)


def _engine_problems(engine: Engine) -> Iterator[Problem]:
    gpu_counts = [m.get(GPU_RESOURCE) for m in (engine.resources.limits, engine.resources.requests)]
    if any(str(count) != str(engine.tensor_parallel_size) for count in gpu_counts if count is not None):
        yield _problem("spec.engine.resources", GPU_PER_RANK)
    for index, var in enumerate(engine.env):
        if var.value is not None and var.value_from is not None:
            yield _problem(f"spec.engine.env[{index}].valueFrom", ENV_VALUE_OR_SOURCE)
    for index, toleration in enumerate(engine.tolerations):
        if toleration.operator is TolerationOperator.EXISTS and toleration.value is not None:
            yield _problem(f"spec.engine.tolerations[{index}].value", TOLERATION_EXISTS_WITHOUT_VALUE)
    if engine.pod_template is not None:
        yield from _template_problems(engine.pod_template)


def _template_problems(template: PodTemplate) -> Iterator[Problem]:
    """What the engine pods' template may not ask for (`api.podsecurity`), and a token mounted unconfirmed."""
    field = "spec.engine.podTemplate"
    if template.automount_service_account_token and not template.allow_service_account_token:
        yield _problem(f"{field}.automountServiceAccountToken", TOKEN_NEEDS_OPT_IN)
    refused = [
        *annotation_refusals(template.annotations, f"{field}.annotations"),
        *volume_refusals(template.volumes, f"{field}.volumes"),
        *context_refusals(template.security_context or {}, f"{field}.securityContext"),
        *container_refusals(template.container.to_wire(), f"{field}.container"),
    ]
    yield from (Problem(where, why) for where, why in refused)


def _arm_problems(spec: SpeculationPilotSpec) -> Iterator[Problem]:
    draft = spec.speculative.draft
    if draft.method in METHODS_WITH_DRAFT_MODEL and draft.model is None:
        yield _problem("spec.speculative.draft.model", DRAFT_MODEL_REQUIRED)
    if draft.method in METHODS_WITHOUT_DRAFT_MODEL and draft.model is not None:
        yield _problem("spec.speculative.draft.model", DRAFT_MODEL_FORBIDDEN)
    if draft.revision is not None and draft.model is None:
        yield _problem("spec.speculative.draft.revision", DRAFT_REVISION_NEEDS_MODEL)
    if spec.engine is None:
        return  # the workload's tensor parallel size is checked once it is read
    engine_tp = spec.engine.tensor_parallel_size
    if draft.tensor_parallel_size not in (None, 1, engine_tp):
        yield _problem("spec.speculative.draft.tensorParallelSize", DRAFT_TENSOR_PARALLEL)
    alternative = spec.alternative
    if alternative is None:
        return
    alternative_tp = alternative.tensor_parallel_size or engine_tp
    if not spec.control.enabled:
        yield _problem("spec.alternative", ALTERNATIVE_NEEDS_CONTROL)
    if alternative.replicas * alternative_tp > spec.speculative.replicas * engine_tp:
        yield _problem("spec.alternative", ALTERNATIVE_GPU_BUDGET)
    if not alternative.extra_args and alternative.replicas == spec.baseline.replicas and alternative_tp == engine_tp:
        yield _problem("spec.alternative", ALTERNATIVE_DIFFERS)


def _schedule_problems(spec: SpeculationPilotSpec) -> Iterator[Problem]:
    """The draft's schedule rendered as the engine's vLLM reads it, judged by vLLM's own rules at start-up
    (`wire.batchschedule`), and the CRD's rules that hold it to what vLLM would otherwise change silently:
    ranges written out of order, a range's k above the draft's."""
    draft, field = spec.speculative.draft, "spec.speculative.draft.schedule"
    if draft.schedule is None:
        return
    written = tuple(entry.batch_range for entry in draft.schedule)
    if any(entry.k > draft.num_speculative_tokens for entry in written):
        yield _problem(field, SCHEDULE_WITHIN_DRAFT)
    try:
        read = batchschedule.validate([entry.render() for entry in written], spec.vllm_release)
    except batchschedule.ScheduleError as error:
        fix = "write each range with start <= end, the first from 1, each after the previous one ends"
        yield Problem(field, f"vLLM refuses it at start-up ({error}): {fix}")
        return
    if read != written:
        yield _problem(field, SCHEDULE_ASCENDS)


def _scope_problems(spec: SpeculationPilotSpec) -> Iterator[Problem]:
    scopes, router = spec.scopes, spec.router
    yield from _unique("spec.scopes", [scope.name for scope in scopes])
    if router.default_scope is not None and router.default_scope not in {scope.name for scope in scopes}:
        yield _problem("spec.router.defaultScope", DEFAULT_SCOPE_EXISTS)
    timeout, interval = router.request_timeout, spec.analysis.interval
    if any(scope.deadline is not None and scope.deadline > timeout for scope in scopes):
        yield _problem("spec.scopes", DEADLINE_WITHIN_TIMEOUT)
    stages = [stage for scope in scopes for stage in scope.stages]
    if spec.alternative is not None and any(stage.weight > 50 for stage in stages):
        yield _problem("spec.scopes", ALTERNATIVE_SHARE_FITS)
    if any(stage.min_duration < interval for stage in stages):
        yield _problem("spec.scopes", STAGE_SPANS_INTERVAL)
    if any(stage.min_requests < spec.analysis.min_samples for stage in stages):
        yield _problem("spec.scopes", STAGE_SPANS_SAMPLES)
    for index, scope in enumerate(scopes):
        yield from _match_problems(f"spec.scopes[{index}].match", scope.match)
        if scope.match != ScopeMatch() and scope.match in [earlier.match for earlier in scopes[:index]]:
            yield Problem(
                f"spec.scopes[{index}].match",
                "an earlier scope has the same match rules, so this scope would only receive requests "
                "that name it in the scope header",
            )


def _match_problems(field: str, match: ScopeMatch) -> Iterator[Problem]:
    for index, header in enumerate(match.headers):
        if header.type is not HeaderMatchType.REGULAR_EXPRESSION:
            continue
        try:
            re.compile(header.value)
        except re.error as error:
            yield Problem(f"{field}.headers[{index}].value", f"not a valid regular expression: {error}")


def _analysis_problems(spec: SpeculationPilotSpec) -> Iterator[Problem]:
    analysis = spec.analysis
    window = analysis.window
    if window < analysis.interval:
        yield _problem("spec.analysis.window", WINDOW_COVERS_INTERVAL)
    if analysis.thresholds.kv_cache_usage.sustained_for > window:
        yield _problem("spec.analysis.thresholds.kvCacheUsage.sustainedFor", WINDOW_COVERS_KV_CACHE)
    minimum = analysis.thresholds.min_acceptance_length
    if minimum is not None and minimum > 1 + spec.speculative.draft.num_speculative_tokens:
        yield _problem("spec.analysis.thresholds.minAcceptanceLength", ACCEPTANCE_LENGTH_REACHABLE)
    source = analysis.metrics_source
    if source is not None and (source.prometheus.url is None) == (source.prometheus.endpoint is None):
        yield _problem("spec.analysis.metricsSource.prometheus.url", ONE_PROMETHEUS)
    arms = source.prometheus.arms if source is not None else None
    if arms is not None and arms.baseline == arms.speculative:
        yield _problem("spec.analysis.metricsSource.prometheus.arms.speculative", ARM_LABELS_DIFFER)
    if arms is not None and spec.control.enabled and arms.control is None:
        yield _problem("spec.analysis.metricsSource.prometheus.arms", CONTROL_LABELS_GIVEN)
    forecast = analysis.forecast
    if forecast is not None and (forecast.profile is None) == (forecast.config_map is None):
        yield _problem("spec.analysis.forecast.profile", ONE_FORECAST_PROFILE)


def _rehearsal_problems(spec: SpeculationPilotSpec) -> Iterator[Problem]:
    rehearsal = spec.rehearsal
    if rehearsal is None:
        return
    if not spec.control.enabled:
        yield _problem("spec.rehearsal", REHEARSAL_NEEDS_CONTROL)
    if (rehearsal.peak.per_replica is None) == (rehearsal.peak.production_factor is None):
        yield _problem("spec.rehearsal.peak", PEAK_ONE_SOURCE)
    if rehearsal.step_duration < spec.analysis.window:
        yield _problem("spec.rehearsal.stepDuration", REHEARSAL_STEP_SPANS_WINDOW)
    planned = rehearsal.step_duration * (rehearsal.steps + (2 if rehearsal.restart else 1)) + (
        rehearsal.burst.duration if rehearsal.burst else timedelta()
    )
    if rehearsal.max_duration < planned:
        yield _problem("spec.rehearsal.maxDuration", REHEARSAL_FITS_CAP)
