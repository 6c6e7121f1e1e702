#!/usr/bin/env bash
# Ray for the device machine, which has no network, Python 3.12, and takes at most 64 MiB a call:
# Ray's manylinux wheel (~80 MB) cut down to what `ray.init()`, actors and tasks need, as one
# xz tarball under .whl/ (about 40 MB), plus the few pure-Python wheels Ray needs that the device
# image lacks (jsonschema and its own needs; the image has click, filelock, msgpack, packaging,
# protobuf, pyyaml, requests, psutil, colorama, aiohttp).
#
#   benchmarks/ray_wheel.sh                 # cp312, for the device: .whl/ray-stripped.tar.xz
#   PY=3.11 DEST=/tmp/ray311 benchmarks/ray_wheel.sh   # the same cut of another Python's wheel
#
# Run it here (it downloads); the device call carries .whl, and benchmarks/device_setup.sh
# unpacks the tarball to /tmp/ray-stripped and puts it on PYTHONPATH when it is there.
# What goes: Ray's libraries (serve, tune, rllib, data, train, llm, air, ...), the dashboard's
# web client, the Java jars, its tests, vendored copies of packages the image has
# (ray/thirdparty_files), compiled bytecode; the binaries lose their symbol tables.
set -euo pipefail
PY=${PY:-3.12}
VERSION=${RAY_VERSION:-2.60.0}
DEST=${DEST:-.whl}
tag="cp${PY/./}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$DEST"

fetch() {  # pure-Python or manylinux wheels for the device's Python, no dependencies
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PY" --implementation cp \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
    -d "$1" "${@:2}"
}

fetch "$work/wheel" "ray==$VERSION"
# Ray needs jsonschema; the image has attrs but not jsonschema's other needs
fetch "$DEST" "jsonschema==4.25.1" "jsonschema-specifications==2025.9.1" "referencing==0.36.2" "rpds-py==0.27.1"

mkdir -p "$work/tree"
unzip -q "$work"/wheel/ray-"$VERSION"-"$tag"-*.whl -d "$work/tree"
cd "$work/tree/ray"
# Ray's libraries: a search needs the core (actors, tasks, object store) only
# (ray.widgets, ray.dag and ray.experimental.channel are imported by ray.init and ray.shutdown)
rm -rf serve tune rllib data train llm air workflow workflows \
  util/dask util/spark util/joblib util/multiprocessing util/collective util/sgd
# the dashboard's web client (a built JavaScript app), Java, vendored copies of packages the image has
rm -rf dashboard/client jars thirdparty_files
# tests, type stubs, bytecode
find . -depth \( -name tests -o -name test -o -name __pycache__ \) -type d -exec rm -rf {} +
find . \( -name '*.pyc' -o -name '*.pyi' \) -delete
# the binaries' symbol tables (debugging only)
strip --strip-unneeded _raylet.so core/src/ray/raylet/raylet core/src/ray/gcs/gcs_server
find . -name '*.so' ! -name _raylet.so -exec strip --strip-unneeded {} + 2>/dev/null || true
cd "$work/tree"
rm -rf ray-"$VERSION".dist-info/RECORD  # its hashes name files no longer here
out="$(cd "$OLDPWD" && realpath "$DEST")/ray-stripped-$tag.tar.xz"
tar -cf - ray ray-"$VERSION".dist-info | xz -T0 -9 > "$out"
echo "unpacked: $(du -sm "$work/tree" | cut -f1) MB; $out: $(du -m "$out" | cut -f1) MB"
