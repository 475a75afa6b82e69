"""The handover package: `specpilot report NAME` writes it from the pilot and its evidence store."""
