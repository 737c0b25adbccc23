#!/usr/bin/env bash
# Set up anydev on the lent GPU machine (no package index there): install the carried wheels
# (.whl/: cffi, pycparser, gguf — see ../shared/tools/device-wheels.sh) and the project itself.
set -euo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null
echo "PYTHONPATH=$PYTHONPATH"
