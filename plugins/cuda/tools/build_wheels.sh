#!/usr/bin/env bash
# Build, on a machine WITHOUT a GPU, the wheels that plugins/cuda/tools/gpu_check.sh installs on
# a GPU machine that has no network: PyCUDA for CPython 3.12 (the GPU machine's Python) built
# against this machine's CUDA headers, and the dependencies of PyCUDA that the GPU machine's
# Python environment lacks (pytools, platformdirs, mako, siphash24).
#
#   bash plugins/cuda/tools/build_wheels.sh             # from the repository root; into .whl/
#   WHL=/some/dir PY=python3.12 bash plugins/cuda/tools/build_wheels.sh
#
# Idempotent: a wheel already in $WHL is neither built nor downloaded again (delete it to redo).
#
# There is no libcuda here, but PyCUDA's _driver extension links against it. So the build links
# against a stub libcuda.so.1 generated from CUDA's own headers (every cu* function of cuda.h and
# cudaProfiler.h as an empty function): the extension gets DT_NEEDED libcuda.so.1 and no RPATH,
# and on the GPU machine the dynamic loader finds the real driver. The stub is never installed.
#
# Environment: PY (a CPython 3.12; default: python3.12 on PATH or under ~/.pyenv), CUDA_HOME
# (default /usr/local/cuda), PYCUDA_VERSION (default 2026.1), WHL (default <repo>/.whl),
# WITH_SKLEARN=1 also downloads scikit-learn, scipy, joblib and threadpoolctl for cp312 (about
# 50 MB: only if the GPU machine lacks scikit-learn and the carry limit of 64 MiB allows it).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
WHL=${WHL:-$REPO/.whl}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
PYCUDA_VERSION=${PYCUDA_VERSION:-2026.1}
# The pure-Python (and one binary) dependencies, pinned to what was tested with PyCUDA above.
DEPS=(pytools==2026.1.1 platformdirs==4.14.8 mako==1.4.3 siphash24==1.9)
SKLEARN_DEPS=(scikit-learn scipy joblib threadpoolctl)

if [ -z "${PY:-}" ]; then
  for c in python3.12 "$HOME"/.pyenv/versions/3.12*/bin/python3; do
    if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; then
      PY=$c; break
    fi
  done
fi
if [ -z "${PY:-}" ]; then echo "build_wheels: no CPython 3.12 found; set PY=/path/to/python3.12" >&2; exit 1; fi
mkdir -p "$WHL"
echo "build_wheels: into $WHL with $PY ($("$PY" --version 2>&1)), CUDA headers from $CUDA_HOME"

have() { compgen -G "$WHL/$1" >/dev/null; }

# -- PyCUDA ---------------------------------------------------------------------------------
if have "pycuda-$PYCUDA_VERSION-cp312-cp312-*.whl"; then
  echo "build_wheels: pycuda $PYCUDA_VERSION wheel present, not rebuilt"
else
  [ -f "$CUDA_HOME/include/cuda.h" ] || { echo "build_wheels: $CUDA_HOME/include/cuda.h not found (set CUDA_HOME)" >&2; exit 1; }
  W=$(mktemp -d /tmp/tw-pycuda-build.XXXXXX); trap 'rm -rf "$W"' EXIT
  S=$W/cudastub; mkdir -p "$S"
  for h in cuda.h cudaProfiler.h; do gcc -E -P -I"$CUDA_HOME/include" "$CUDA_HOME/include/$h"; done |
    grep -oE '\b(cu[A-Z][A-Za-z0-9_]*)\s*\(' | sed 's/\s*(//' | sort -u | awk '{print "void " $1 "(void) {}"}' > "$S/stub.c"
  gcc -shared -fPIC -o "$S/libcuda.so.1" -Wl,-soname,libcuda.so.1 "$S/stub.c"
  ln -sf libcuda.so.1 "$S/libcuda.so"
  (cd "$W" && "$PY" -m pip download -q "pycuda==$PYCUDA_VERSION" --no-binary pycuda --no-deps -d . \
     && tar xzf "pycuda-$PYCUDA_VERSION.tar.gz")
  (cd "$W/pycuda-$PYCUDA_VERSION" \
     && "$PY" configure.py --cuda-root="$CUDA_HOME" --cuda-inc-dir="$CUDA_HOME/include" \
          --cudadrv-lib-dir="$S" --no-cuda-enable-curand \
     && "$PY" -m pip wheel -q --no-deps -w "$WHL" .)
  have "pycuda-$PYCUDA_VERSION-cp312-cp312-*.whl" || { echo "build_wheels: the pycuda wheel was not made" >&2; exit 1; }
  echo "build_wheels: built $(cd "$WHL" && ls pycuda-"$PYCUDA_VERSION"-cp312-*.whl)"
fi

# -- dependencies -----------------------------------------------------------------------------
fetch() {  # name==version or name: download the cp312 manylinux (or pure) wheel unless present
  local spec=$1 name=${1%%==*} ver=
  [[ $spec == *==* ]] && ver=${spec#*==}
  local glob; glob="$(echo "$name" | tr '-' '_')-${ver:-*}-*.whl"
  if have "$glob" || have "$name-${ver:-*}-*.whl"; then echo "build_wheels: $spec present"; return; fi
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --abi cp312 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux_2_28_x86_64 --platform any -d "$WHL" "$spec"
  echo "build_wheels: downloaded $spec"
}
for d in "${DEPS[@]}"; do fetch "$d"; done
if [ "${WITH_SKLEARN:-0}" = 1 ]; then for d in "${SKLEARN_DEPS[@]}"; do fetch "$d"; done; fi

echo "build_wheels: $WHL holds $(du -sh "$WHL" | cut -f1):"
ls -1 "$WHL"/*.whl | sed 's|.*/|  |'
