"""`kubectl specpilot calibrate`: the step costs of a team's model shapes, measured on its own GPU.

`measure` is the measuring code, standalone so that a pod of the team's image runs it as one file;
`job` renders the Job that runs it and the ConfigMap that holds its inputs and, once collected, its
measurements.
"""
