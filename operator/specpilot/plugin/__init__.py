"""`kubectl specpilot` and `specpilot report`: the pilot seen and acted on from outside the operator."""
