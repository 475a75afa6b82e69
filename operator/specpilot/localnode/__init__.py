"""A local node agent: runs pods of the project's own image as local processes on loopback IPs.

It stands in for a kubelet on hosts without a container runtime, so that the real control
plane (scheduler, EndpointSlice controller, node lifecycle) sees a node whose pods really run.
"""
