#!/usr/bin/env bash
# The one command to run on a GPU machine (no network needed), from the repository root, with the
# wheels of plugins/cuda/tools/build_wheels.sh in .whl/:
#
#   bash plugins/cuda/tools/gpu_check.sh [SECTION ...]
#
# Sections, run in the order given (default: tests conformance):
#   tests        pytest plugins/cuda/tests, the real-GPU backend (what needs no GPU is deselected:
#                see TESTS_K below; TW_TESTS_ARGS replaces the -k)
#   conformance  the conformance kit for device type GPU, from an empty folder
#   digits       python3 examples/digits.py --model {mlp,cnn} --device /device:GPU:0
#   bench        python3 benchmarks/gpu.py (tensorweave vs PyTorch on the same GPU)
#   sanitizer    compute-sanitizer --tool memcheck, then --tool racecheck, over the conformance kit
#   all          every section above
# Setup always runs first: the wheels installed into $TW_SITE (/tmp/site) on PYTHONPATH, the core
# and the cpu and cuda plugins pip-installed from the tree (no index, no build isolation), and an
# environment report (GPU, nvcc, PyCUDA kernel + page-locked copy, tensorweave plugins/devices/doctor).
#
# Logs go to $OUT (default /tmp/out): setup.log env.log tests.log conformance.log
# conformance_gpu.json digits_{mlp,cnn}.log bench.log bench_gpu.json bench_section.md
# sanitizer_{memcheck,racecheck}.log, and summary.txt, which is also printed at the end.
#
# Time: TW_BUDGET (seconds, default 560) is the whole run's; a section that would start with less
# than 20 s left is skipped, and each section runs under `timeout` of at most what is left and its
# own limit: TW_T_TESTS (240), TW_T_CONFORMANCE (150), TW_T_DIGITS (150 per model), TW_T_BENCH (240),
# TW_T_SANITIZER (150 per tool). Other knobs: TW_DIGITS_ARGS (e.g. "--epochs 5"), TW_BENCH_ARGS
# (e.g. "--only matmul,mlp"), TW_SANITIZER_ARGS (default "--tw-no-gradients"; e.g. "--tw-ops=MatMul,Relu"),
# TW_DEVICE (default /device:GPU:0). Exit status: 0 when every section that ran passed.
set -u -o pipefail
export PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore PYTHONDONTWRITEBYTECODE=1
R=$(pwd)
OUT=${OUT:-/tmp/out}
SITE=${TW_SITE:-/tmp/site}
DEVICE=${TW_DEVICE:-/device:GPU:0}
BUDGET=${TW_BUDGET:-560}
START=$(date +%s)
mkdir -p "$OUT"
[ -d "$R/plugins/cuda" ] && [ -f "$R/pyproject.toml" ] || { echo "gpu_check: run from the repository root" >&2; exit 2; }

SECTIONS=("$@")
[ ${#SECTIONS[@]} = 0 ] && SECTIONS=(tests conformance)
[ "${SECTIONS[*]}" = all ] && SECTIONS=(tests conformance digits bench sanitizer)
for s in "${SECTIONS[@]}"; do
  case $s in tests|conformance|digits|bench|sanitizer) ;; *) echo "gpu_check: unknown section '$s'" >&2; exit 2;; esac
done

# What the GPU adds: the real-GPU backend of each runtime test. Deselected: the emulator's copies
# of them, the emulator-only error tests and benchmark test, and the nvcc-only PTX checks (all
# of which need no GPU and run in CI).
TESTS_K="not emulator and not test_cuda_errors and not test_gpu_benchmark and not test_cuda_kernels_ptx"
SUMMARY=()
FAILED=0
left() { echo $(( BUDGET - ($(date +%s) - START) )); }
limit() { local l; l=$(left); [ "$1" -lt "$l" ] && echo "$1" || echo "$l"; }  # min(section limit, time left)
record() {  # name rc|skip seconds detail
  local status=ok
  if [ "$2" = skip ]; then status=skipped
  elif [ "$2" = 124 ] || [ "$2" = 137 ]; then status="TIMED OUT"; FAILED=1
  elif [ "$2" != 0 ]; then status="FAILED rc=$2"; FAILED=1
  fi
  SUMMARY+=("$(printf '%-20s %-14s %5ss  %s' "$1" "$status" "$3" "$4")")
}
pytest_line() { grep -E '(passed|failed|error|skipped|deselected)( |,|$).* in [0-9.]+s' "$1" | tail -1; }
timeout_args() { python3 -c 'import pytest_timeout' 2>/dev/null && echo "--timeout $1 --timeout-method=thread"; }

# -- setup ------------------------------------------------------------------------------------
t0=$(date +%s)
NV=$(python3 -c "import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], 'cu13', 'bin'))" 2>/dev/null)
export PATH=$PATH:/usr/local/cuda/bin${NV:+:$NV}
{
  shopt -s nullglob; W=("$R"/.whl/*.whl); shopt -u nullglob
  if [ ${#W[@]} = 0 ]; then echo "no wheels in $R/.whl (run plugins/cuda/tools/build_wheels.sh; carry .whl)"; false
  else python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "${W[@]}"
  fi
} > "$OUT/setup.log" 2>&1 && export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH} \
  && python3 -m pip install -q --no-index --no-deps --no-build-isolation ./ ./plugins/cpu ./plugins/cuda >> "$OUT/setup.log" 2>&1
rc=$?
record setup $rc $(( $(date +%s) - t0 )) "wheels from .whl into $SITE; tensorweave, cpu, cuda installed"
if [ $rc != 0 ]; then cat "$OUT/setup.log"; printf '%s\n' "${SUMMARY[@]}" | tee "$OUT/summary.txt"; exit 1; fi

t0=$(date +%s)
{
  echo "== $(date -u +%FT%TZ) $(hostname) sections: ${SECTIONS[*]}"
  nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max --format=csv
  echo "nvcc: $(command -v nvcc) $(nvcc --version 2>/dev/null | tail -1)"
  echo "cpus: $(nproc); python: $(python3 --version 2>&1)"
  python3 -m pip list 2>/dev/null | grep -iE '^(numpy|torch|pycuda|pytest|pytest-timeout|scikit-learn|nvidia-cublas|setuptools) '
  python3 - <<'EOF'
import time, numpy as np, pycuda.autoinit, pycuda.driver as d
from pycuda.compiler import SourceModule
f = SourceModule("__global__ void k(float*a){a[threadIdx.x]*=2;}").get_function("k")
a = np.ones(4, np.float32); f(d.InOut(a), block=(4, 1, 1), grid=(1, 1))
print("PyCUDA", d.get_version(), "driver", d.get_driver_version(), d.Context.get_device().name(), "kernel ok" if (a == 2).all() else a)
h = d.pagelocked_empty((1 << 24,), np.float32, "C", d.host_alloc_flags.PORTABLE); h[:] = 1
g = d.mem_alloc(h.nbytes); s = d.Stream(); d.memcpy_htod_async(g, h, s); s.synchronize()
t = time.perf_counter(); [d.memcpy_htod_async(g, h, s) for _ in range(5)]; s.synchronize(); t = time.perf_counter() - t
print(f"page-locked 64 MiB host->device: {5 * h.nbytes / t / 1e9:.1f} GB/s (raw PyCUDA)")
EOF
  python3 -m tensorweave plugins; python3 -m tensorweave devices; python3 -m tensorweave doctor
} > "$OUT/env.log" 2>&1
rc=$?
cat "$OUT/env.log"
record env $rc $(( $(date +%s) - t0 )) "$(grep -m1 -E '^PyCUDA |^ImportError|Error:' "$OUT/env.log") $(grep -m1 'page-locked 64 MiB' "$OUT/env.log")"

# -- sections -----------------------------------------------------------------------------------
sec_tests() {
  local T A; T=$(limit "${TW_T_TESTS:-240}")
  eval "A=(${TW_TESTS_ARGS:-"-k '$TESTS_K'"})"
  # shellcheck disable=SC2046
  timeout -k 10 "$T" python3 -m pytest -p no:cacheprovider --import-mode=importlib -q -ra --maxfail=25 \
    "${A[@]}" $(timeout_args 120) plugins/cuda/tests 2>&1 | tee "$OUT/tests.log"
  local rc=$?
  DETAIL=$(pytest_line "$OUT/tests.log"); return $rc
}

sec_conformance() {
  local T; T=$(limit "${TW_T_CONFORMANCE:-150}")
  mkdir -p /tmp/tw-conformance && cd /tmp/tw-conformance || return 1
  # shellcheck disable=SC2046
  timeout -k 10 "$T" python3 -m pytest -p no:cacheprovider -q -rfE --tw-device=GPU \
    --tw-report="$OUT/conformance_gpu.json" $(timeout_args 60) 2>&1 | tee "$OUT/conformance.log"
  local rc=$?
  cd "$R" || return 1
  DETAIL=$(pytest_line "$OUT/conformance.log"); return $rc
}

sec_digits() {
  if ! python3 -c 'import sklearn' 2>/dev/null; then
    DETAIL="scikit-learn is not installed (WITH_SKLEARN=1 build_wheels.sh carries it)"; return 99
  fi
  local rc=0 m T r
  DETAIL=""
  for m in mlp cnn; do
    T=$(limit "${TW_T_DIGITS:-150}")
    [ "$T" -lt 20 ] && { DETAIL+="$m: no time left; "; rc=124; continue; }
    # shellcheck disable=SC2086
    timeout -k 10 "$T" python3 examples/digits.py --model "$m" --device "$DEVICE" ${TW_DIGITS_ARGS:-} 2>&1 \
      | tee "$OUT/digits_$m.log"
    r=$?; [ $r != 0 ] && rc=$r
    DETAIL+="$m: $(grep -E 'test accuracy|^done in|^[A-Za-z_.]*(Error|Exception)' "$OUT/digits_$m.log" | tail -2 | cut -c1-200 | tr '\n' ' ')(rc=$r); "
  done
  return $rc
}

sec_bench() {
  local T; T=$(limit "${TW_T_BENCH:-240}")
  # shellcheck disable=SC2086
  timeout -k 10 "$T" python3 benchmarks/gpu.py --device "$DEVICE" --json "$OUT/bench_gpu.json" \
    --block-out "$OUT/bench_section.md" ${TW_BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log"
  local rc=$?
  DETAIL="$(grep -cE '^\| (matmul|mlp|transfer|conv) ' "$OUT/bench.log") rows in bench.log; docs block: bench_section.md"
  DETAIL+=" $(grep -E 'skipped:|FAILED:|^gpu.py:' "$OUT/bench.log" | tr '\n' ' ' | cut -c1-300)"
  return $rc
}

find_sanitizer() {
  local c
  for c in "$(command -v compute-sanitizer)" /usr/local/cuda/compute-sanitizer/compute-sanitizer \
           /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda-*/compute-sanitizer/compute-sanitizer \
           ${NV:+"$NV"/compute-sanitizer} ${NV:+"$NV"/../compute-sanitizer/compute-sanitizer}; do
    [ -n "$c" ] && [ -x "$c" ] && { echo "$c"; return 0; }
  done
  [ -n "$NV" ] && find "$(dirname "$NV")/.." -name compute-sanitizer -type f -perm -u+x 2>/dev/null | head -1
}

sec_sanitizer() {
  local CS; CS=$(find_sanitizer)
  if [ -z "$CS" ]; then DETAIL="compute-sanitizer not found (CUDA toolkit's compute-sanitizer/ or nvidia-cuda-sanitizer-api)"; return 99; fi
  local rc=0 tool T r A
  eval "A=(${TW_SANITIZER_ARGS:---tw-no-gradients})"
  DETAIL=""
  mkdir -p /tmp/tw-sanitizer && cd /tmp/tw-sanitizer || return 1
  for tool in memcheck racecheck; do
    T=$(limit "${TW_T_SANITIZER:-150}")
    [ "$T" -lt 20 ] && { DETAIL+="$tool: no time left; "; rc=124; continue; }
    timeout -k 10 "$T" "$CS" --tool "$tool" --target-processes all --print-limit 100 \
      python3 -m pytest -p no:cacheprovider -q -rfE --tw-device=GPU "${A[@]}" \
      > "$OUT/sanitizer_$tool.log" 2>&1
    r=$?; [ $r != 0 ] && rc=$r
    echo "-- $tool (rc=$r):"; grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitizer_$tool.log" | sort | uniq -c
    pytest_line "$OUT/sanitizer_$tool.log"
    DETAIL+="$tool: $(grep -E 'ERROR SUMMARY' "$OUT/sanitizer_$tool.log" | sort | uniq -c | tr -s ' ' | tr '\n' ';') $(pytest_line "$OUT/sanitizer_$tool.log" | tr -d '=') (rc=$r); "
  done
  cd "$R" || return 1
  return $rc
}

for s in "${SECTIONS[@]}"; do
  l=$(left)
  if [ "$l" -lt 20 ]; then record "$s" skip 0 "no time left of TW_BUDGET=$BUDGET s"; continue; fi
  echo; echo "===== $s ($l s left) ====="
  t0=$(date +%s); DETAIL=""
  "sec_$s"; rc=$?
  if [ $rc = 99 ]; then record "$s" skip $(( $(date +%s) - t0 )) "$DETAIL"; else record "$s" $rc $(( $(date +%s) - t0 )) "$DETAIL"; fi
done

echo; echo "===== summary ($(( $(date +%s) - START )) s; logs in $OUT) ====="
printf '%s\n' "${SUMMARY[@]}" | tee "$OUT/summary.txt"
exit $FAILED
