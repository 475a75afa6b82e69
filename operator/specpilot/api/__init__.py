"""The SpeculationPilot API: pydantic models that are the single source of the CRD, and the judge of a spec.

Pure code: nothing here talks to Kubernetes or the network.
"""

from specpilot.api.pilot import API_VERSION, GROUP, KIND, PLURAL, VERSION, SpeculationPilot
from specpilot.api.spec.pilot_spec import SpeculationPilotSpec
from specpilot.api.status.pilot_status import FALLBACK_LIMIT, SpeculationPilotStatus
from specpilot.api.validate import Problem, check_spec, validate

__all__ = [
    "API_VERSION",
    "FALLBACK_LIMIT",
    "GROUP",
    "KIND",
    "PLURAL",
    "VERSION",
    "Problem",
    "SpeculationPilot",
    "SpeculationPilotSpec",
    "SpeculationPilotStatus",
    "check_spec",
    "validate",
]
