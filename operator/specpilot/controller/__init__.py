"""The operator: a pure core (`render`, `routing`, `status`, `observe`, `progress`) and a thin shell
around it (`reconcile` applies and writes, `measure` and `quality_gates` collect what is judged, `kube`
talks to the API server, `handlers` wires Kopf, `main` runs it).
"""
