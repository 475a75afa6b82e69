#!/bin/sh
# The image's install steps (operator/Dockerfile runs exactly this; tests/component/test_image.py
# runs it in a fresh directory): a virtualenv at $1 holding the specpilot package built from the
# source tree at $2, with its bytecode compiled now, so that nothing is written at run time and the
# root filesystem can be read-only.
set -eu
prefix="$1"
source="$2"
python3 -m venv "$prefix"
"$prefix/bin/pip" install --no-cache-dir --disable-pip-version-check --no-compile --quiet "$source"
"$prefix/bin/python" -m compileall -q "$prefix/lib"
"$prefix/bin/specpilot" --version
