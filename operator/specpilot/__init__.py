"""specpilot: staged pilots of speculative decoding for vLLM services on Kubernetes."""

__version__ = "0.1.0"
