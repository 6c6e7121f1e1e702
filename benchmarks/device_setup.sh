# Source this at the start of a device command (the H200 has no network and no evokernel):
#   source benchmarks/device_setup.sh && python3 benchmarks/gate_h200.py --out $OUT ...
# It needs the call to carry `.whl` (cp312 wheels of msgspec, optuna, cmaes, sqlalchemy,
# greenlet, alembic, mako, colorlog: see the device tool's README), and
# installs the package by copying it with its package-dir mapping into /tmp/pkg.
# (`benchmarks/device.sh pair` sets up once; its two jobs find EVOKERNEL_SETUP_DONE set)
if [ -z "${EVOKERNEL_SETUP_DONE:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || return 1
  rm -rf /tmp/pkg && mkdir -p /tmp/pkg/evokernel && cp -r evokernel/. /tmp/pkg/evokernel/
  for d in search_spaces mutators evaluators; do cp -r "$d" "/tmp/pkg/evokernel/$d"; done
  # a dist-info so importlib.metadata finds evokernel's entry points (SGLang's load_plugins reads
  # the sglang.srt.plugins group), as an installed evokernel would have
  mkdir -p /tmp/pkg/evokernel-0.0.0.dist-info
  printf 'Metadata-Version: 2.1\nName: evokernel\nVersion: 0.0.0\n' > /tmp/pkg/evokernel-0.0.0.dist-info/METADATA
  printf '[sglang.srt.plugins]\nevokernel = evokernel.integrations.sglang.plugin:register\n' > /tmp/pkg/evokernel-0.0.0.dist-info/entry_points.txt
  export EVOKERNEL_SETUP_DONE=1
fi
export PYTHONPATH=/tmp/pkg:/tmp/site PYTHONUNBUFFERED=1
