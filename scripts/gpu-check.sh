#!/usr/bin/env bash
# gpu-check.sh — the GPU check of glassbox's CUDA backend, in one command.
#
# What it runs (on one GPU; about 4 minutes, at most 6: timeouts of 300 s for gpu_check and
# 45 s for each PyTorch run):
#   1. `gpu_check` (runner/examples/gpu_check.rs; every check and tolerance is documented in
#      runner/examples/gpu_check/check.rs): per-op parity against the CPU reference at two shape
#      sets (materialized and fused attention, bf16 matmuls against their rounded CPU twin),
#      whole-step parity on 20 steps of examples/tiny.toml, run-to-run bitwise determinism, the
#      first two steps of the ladder rung (bench/configs/ladder-rung.toml) at batch 2 on the CPU
#      in f32 and on the GPU in f32 and bf16, and the ladder-rung benchmark (batch 32, 6 steps)
#      in f32 and bf16 with per-kernel-class rates; a benchmark run that does not succeed
#      through every step fails the check;
#   2. the PyTorch eager twin of the same model and step (bench/moe_torch.py) on the same GPU in
#      float32 and bfloat16, and the ratio glassbox / PyTorch for each.
# Reports go to $OUT (default ./gpu-report), at most 7 files: gpu-report.md, gpu-report.json,
# gpu_check.log, torch-float32.json, torch-bfloat16.json, torch.err, nvidia-smi.txt. The
# kernel cache lives OUTSIDE $OUT ($GLASSBOX_KERNEL_CACHE, default /tmp/glassbox-kernel-cache):
# the device tool returns only a few files from $OUT, and 20 .ptx files there could crowd out
# the report.
#
# The GPU machine has no Rust toolchain and no network. Prepare on the build machine, from the
# repository root, with NVRTC 13 loadable (`eval "$(cargo xtask env)"` provides it):
#   bash scripts/gpu-check.sh --prepare
# which builds the release gpu_check, strips it into gpu-bin/ and compiles every kernel for
# sm_90 into gpu-bin/kernel-cache/ (used there when its NVRTC has the same version; else the
# kernels are compiled there). Ship gpu-bin/ with the working tree (the device tool's `carry`).
# Then, on the GPU machine, from the repository root:
#   bash scripts/gpu-check.sh
# Libraries: NVRTC and cuBLAS 13 from the Python wheels when importable (nvidia.cu13), else the
# CUDA toolkit's lib64 ($CUDA_HOME or /usr/local/cuda); the driver (libcuda) from the system.
# Other modes: --dry-run prints the plan and runs nothing; --no-gpu runs gpu_check's no-GPU mode
# (the CPU twin as the device, small configs) without PyTorch.
# Exit status: 0 all checks passed, 1 a check failed, 2 usage, 3 the check could not run.
set -uo pipefail
cd "$(dirname "$0")/.."

mode=run
case "${1:-}" in
  "") ;;
  --prepare) mode=prepare ;;
  --dry-run) mode=dry-run ;;
  --no-gpu) mode=no-gpu ;;
  *) echo "gpu-check: unknown argument $1 (expected --prepare, --dry-run or --no-gpu)" >&2; exit 2 ;;
esac

BIN="${GPU_CHECK_BIN:-gpu-bin/gpu_check}"
OUT="${OUT:-$PWD/gpu-report}"
CACHE="${GLASSBOX_KERNEL_CACHE:-/tmp/glassbox-kernel-cache}"
SPEC=examples/tiny.toml
RUNG=bench/configs/ladder-rung.toml

if [ "$mode" = prepare ]; then
  set -e
  cargo build --release -p glassbox-runner --features cuda --example gpu_check
  mkdir -p gpu-bin
  cp "${CARGO_TARGET_DIR:-target}/release/examples/gpu_check" gpu-bin/gpu_check
  strip gpu-bin/gpu_check
  rm -rf gpu-bin/kernel-cache
  GLASSBOX_KERNEL_CACHE=gpu-bin/kernel-cache gpu-bin/gpu_check --compile-kernels sm_90
  du -sh gpu-bin
  exit 0
fi

# The report directory and the kernel cache must not overlap (gpu_check refuses it too).
case "$(realpath -m "$CACHE")/" in
  "$(realpath -m "$OUT")"/*) echo "gpu-check: the kernel cache $CACHE is inside the report directory $OUT; set GLASSBOX_KERNEL_CACHE elsewhere" >&2; exit 2 ;;
esac

if [ "$mode" = no-gpu ]; then
  GPU_ARGS=(--no-gpu --out "$OUT" --spec "$SPEC" --steps 3 --rung bench/configs/small.toml
            --rung-batch 2 --bench-steps 3 --threads 2)
else
  GPU_ARGS=(--out "$OUT" --spec "$SPEC" --steps 20 --rung "$RUNG" --rung-batch 2 --bench-steps 6)
fi

if [ "$mode" = dry-run ]; then
  echo "plan: OUT=$OUT"
  echo "plan: GLASSBOX_KERNEL_CACHE=$CACHE"
  echo "plan: seed the cache from gpu-bin/kernel-cache when present"
  echo "plan: timeout 300 $BIN ${GPU_ARGS[*]}"
  echo "plan: timeout 45 python3 bench/moe_torch.py $RUNG 4 --dtype float32 > $OUT/torch-float32.json"
  echo "plan: timeout 45 python3 bench/moe_torch.py $RUNG 4 --dtype bfloat16 > $OUT/torch-bfloat16.json"
  exit 0
fi

[ -x "$BIN" ] || { echo "gpu-check: $BIN missing; run \`bash scripts/gpu-check.sh --prepare\` on the build machine" >&2; exit 3; }
mkdir -p "$OUT" "$CACHE"
export GLASSBOX_KERNEL_CACHE="$CACHE"

if [ "$mode" = run ]; then
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader \
    > "$OUT/nvidia-smi.txt" 2>&1 || true
  cat "$OUT/nvidia-smi.txt"
  # Kernels compiled on the build machine (same NVRTC version: same cache keys).
  [ -d gpu-bin/kernel-cache ] && cp -n gpu-bin/kernel-cache/*.ptx "$CACHE"/ 2>/dev/null || true
  # NVRTC and cuBLAS 13: the Python wheels first, then the toolkit's lib64.
  libdir="$(python3 -c "import nvidia.cu13, os; print(os.path.join(list(nvidia.cu13.__path__)[0], 'lib'))" 2>/dev/null || true)"
  if [ -z "$libdir" ] || [ ! -e "$libdir/libnvrtc.so.13" ]; then
    for d in "${CUDA_HOME:-}/lib64" /usr/local/cuda/lib64 /usr/local/cuda-13*/lib64; do
      if [ -e "$d/libnvrtc.so.13" ]; then libdir="$d"; break; fi
    done
  fi
  if [ -n "$libdir" ]; then
    export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "gpu-check: NVRTC/cuBLAS from $libdir"
  fi
fi

timeout 300 "$BIN" "${GPU_ARGS[@]}" 2>&1 | tee "$OUT/gpu_check.log"
status=${PIPESTATUS[0]}
[ "$status" = 124 ] && echo "gpu-check: gpu_check timed out after 300 s (the report holds the sections it finished)" | tee -a "$OUT/gpu-report.md"

if [ "$mode" = run ]; then
  if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    : > "$OUT/torch.err"
    for dt in float32 bfloat16; do
      timeout 45 python3 bench/moe_torch.py "$RUNG" 4 --dtype "$dt" > "$OUT/torch-$dt.json" 2>> "$OUT/torch.err" \
        || echo "gpu-check: the PyTorch $dt benchmark failed (see $OUT/torch.err)" >&2
    done
    python3 - "$OUT" <<'PY'
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
try:
    ours = {b["precision"]: b for b in json.loads((out / "gpu-report.json").read_text()).get("benchmark", [])}
except Exception as e:
    ours = {}
    print(f"glassbox benchmark unavailable: {e}")
lines = ["\n## glassbox vs PyTorch eager (same GPU, same config, same script)\n",
         "| precision | glassbox tok/s | PyTorch eager tok/s | ratio (goal >= 1.5x) |", "|---|---|---|---|"]
for ours_name, dt in (("f32", "float32"), ("bf16", "bfloat16")):
    try:
        torch = json.loads((out / f"torch-{dt}.json").read_text())
        t = torch["tokens_per_second"]
        tv = f"{t:.0f} ({torch['torch']})"
    except Exception as e:
        t, tv = None, f"unavailable ({type(e).__name__})"
    g = ours.get(ours_name, {})
    gt = g.get("tokens_per_second") if g.get("ok") else None
    gv = f"{gt:.0f}" if gt else "unavailable (see the benchmark section)"
    ratio = f"{gt / t:.2f}x" if gt and t else "—"
    lines.append(f"| {ours_name} | {gv} | {tv} | {ratio} |")
text = "\n".join(lines) + "\n"
with open(out / "gpu-report.md", "a") as f:
    f.write(text)
print(text)
PY
  else
    echo "gpu-check: PyTorch with CUDA not importable; no ratio" | tee -a "$OUT/gpu-report.md"
  fi
fi
echo "report: $OUT/gpu-report.md"
exit "$status"
