# Source this at the start of a device command (the H200 has no network and no evokernel):
#   source benchmarks/device_setup.sh && python3 benchmarks/gate_h200.py --out $OUT ...
# It needs the call to carry `.whl` (cp312 wheels of msgspec, optuna, cmaes, sqlalchemy, (for
# SGLang's HTTP server) jsonschema, jsonschema-specifications, referencing, rpds-py, python-multipart,
# greenlet, alembic, mako, colorlog: see the device tool's README), and
# installs the package by copying it with its package-dir mapping into /tmp/pkg.
# (`benchmarks/device.sh pair` sets up once; its two jobs find EVOKERNEL_SETUP_DONE set)
# The cost model (`--strategy model`) needs scikit-learn (its cp312 wheel, joblib and
# threadpoolctl in .whl) and scipy, which the image may lack: scipy's wheel (35 MB) does not fit
# one carry beside Ray's tarball, so carry it in a call without Ray.
# Optional: Ray, for `--ray` and `evokernel fan-out` on a machine of several GPUs. When the call
# carries .whl/ray-stripped-cp312.tar.xz (made here by benchmarks/ray_wheel.sh, with jsonschema's
# wheels beside it), it is unpacked to /tmp/ray-stripped and put on PYTHONPATH.
if [ -z "${EVOKERNEL_SETUP_DONE:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || return 1
  rm -rf /tmp/pkg && mkdir -p /tmp/pkg/evokernel && cp -r evokernel/. /tmp/pkg/evokernel/
  for d in search_spaces mutators evaluators; do cp -r "$d" "/tmp/pkg/evokernel/$d"; done
  # a dist-info so importlib.metadata finds evokernel's entry points (all of pyproject's groups:
  # SGLang's load_plugins reads sglang.srt.plugins, the registry the others), as an installed evokernel would have
  # (named as pyproject's [project] name, evokernel-search, is: the import name is evokernel)
  mkdir -p /tmp/pkg/evokernel_search-0.0.0.dist-info
  printf 'Metadata-Version: 2.1\nName: evokernel-search\nVersion: 0.0.0\n' > /tmp/pkg/evokernel_search-0.0.0.dist-info/METADATA
  python3 - > /tmp/pkg/evokernel_search-0.0.0.dist-info/entry_points.txt <<'PY'
import tomllib
groups = tomllib.load(open("pyproject.toml", "rb"))["project"]["entry-points"]
for group, entries in groups.items():
    print(f"[{group}]")
    for name, target in entries.items():
        print(f"{name} = {target}")
    print()
PY
  if [ -f .whl/ray-stripped-cp312.tar.xz ]; then
    rm -rf /tmp/ray-stripped && mkdir -p /tmp/ray-stripped && tar -xJf .whl/ray-stripped-cp312.tar.xz -C /tmp/ray-stripped || return 1
  fi
  export EVOKERNEL_SETUP_DONE=1
fi
export PYTHONPATH=/tmp/pkg:/tmp/site PYTHONUNBUFFERED=1
# (Ray's actors inherit PYTHONPATH, so they import evokernel and Ray as the driver does)
if [ -d /tmp/ray-stripped/ray ]; then export PYTHONPATH=$PYTHONPATH:/tmp/ray-stripped; fi
