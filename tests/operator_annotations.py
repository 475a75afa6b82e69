"""Annotations the operator keeps on a pilot, shared by the component and cluster tiers."""

from __future__ import annotations

from specpilot.api.pilot import GROUP

# Kopf's state on the pilot, under the operator's prefix (handlers.settings); the cluster tier checks
# that a live pilot carries no other annotation of the operator's.
KOPF_ANNOTATIONS = (f"{GROUP}/kopf-managed", f"{GROUP}/last-handled-configuration")
