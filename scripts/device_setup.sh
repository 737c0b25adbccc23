#!/usr/bin/env bash
# Set up anydev on the lent GPU machine (no package index there): install the carried wheels
# (.whl/: cffi, pycparser, gguf — see ../shared/tools/device-wheels.sh) and the project itself.
# Run it, or source it to keep its PYTHONPATH. Either way every install is tried and the status is
# non-zero when one failed; sourced, it leaves the caller's shell options alone (no `set -e` leaking
# into a recording script, which must go on past a failing step).
_anydev_setup_status=0
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "device_setup: installing the carried wheels (.whl/) failed" >&2; _anydev_setup_status=1; }
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null \
    || { echo "device_setup: installing anydev (pip install -e .) failed" >&2; _anydev_setup_status=1; }
echo "PYTHONPATH=$PYTHONPATH"
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then exit "$_anydev_setup_status"; fi
return "$_anydev_setup_status"
