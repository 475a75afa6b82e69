"""The operator: a pure core (`render`, `routing`, `status`, `observe`) and a thin shell around it
(`reconcile` applies and writes, `kube` talks to the API server, `handlers` wires Kopf, `main` runs it).
"""
