#!/usr/bin/env bash
# gpu-check.sh — the issue-5 GPU check of glassbox's CUDA backend, in one command.
#
# What it does (at most 8 minutes on one H200: timeouts of 330 s for gpu_check and 120 s for
# PyTorch): runs `gpu_check` (runner/examples/gpu_check.rs):
# per-op parity of every CUDA kernel against the CPU reference with stated tolerances, whole-step
# parity on 20 steps of examples/tiny.toml, run-to-run bitwise determinism (two CUDA runs, same
# parameter BLAKE3), and the ladder-rung benchmark (bench/configs/ladder-rung.toml, f32); then the
# PyTorch eager twin of the same model and step (bench/moe_torch.py) on the same GPU for the
# tokens/s ratio. Writes gpu-report.md / gpu-report.json / torch.json to $OUT (or ./gpu-report).
# What it is not: a build. The GPU machine has no Rust toolchain: the binary is built on a CPU
# machine and shipped in the working tree.
#
# Prepare (on the build machine, from the repository root):
#   cargo build --release -p glassbox-runner --features cuda --example gpu_check
#   mkdir -p gpu-bin && cp target/release/examples/gpu_check gpu-bin/ && strip gpu-bin/gpu_check
# Run (on the GPU machine, from the repository root; needs the NVIDIA driver (libcuda), and
# NVRTC + cuBLAS 13 — installed from PyPI below when missing — and PyTorch for the ratio):
#   bash scripts/gpu-check.sh
# Exit status: 0 all checks passed, 1 a check failed, 3 CUDA not usable.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-report}"
mkdir -p "$OUT"
BIN="${GPU_CHECK_BIN:-gpu-bin/gpu_check}"
[ -x "$BIN" ] || { echo "gpu-check: $BIN missing; see the header of $0 for how to build it" >&2; exit 3; }

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/nvidia-smi.txt"

# NVRTC and cuBLAS 13 from PyPI when the machine lacks them (cudarc loads them by name).
libdirs=""
for mod in cu13; do
  d="$(python3 -c "import nvidia.$mod, os; print(os.path.join(list(nvidia.$mod.__path__)[0], 'lib'))" 2>/dev/null || true)"
  [ -n "$d" ] && libdirs="$d"
done
if ! ldconfig -p | grep -q 'libnvrtc.so.13' && [ -z "$libdirs" ]; then
  python3 -m pip install -q 'nvidia-cuda-nvrtc==13.0.*' 'nvidia-cublas==13.0.*' || true
  libdirs="$(python3 -c "import nvidia.cu13, os; print(os.path.join(list(nvidia.cu13.__path__)[0], 'lib'))" 2>/dev/null || true)"
fi
[ -n "$libdirs" ] && export LD_LIBRARY_PATH="$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export GLASSBOX_KERNEL_CACHE="${GLASSBOX_KERNEL_CACHE:-$OUT/kernel-cache}"

status=0
timeout 330 "$BIN" --out "$OUT" --spec examples/tiny.toml --steps 20 \
  --bench bench/configs/ladder-rung.toml --bench-steps 6 2>&1 | tee "$OUT/gpu_check.log"
status=${PIPESTATUS[0]}

if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  timeout 120 python3 bench/moe_torch.py bench/configs/ladder-rung.toml 4 > "$OUT/torch.json" 2> "$OUT/torch.err" \
    || echo "gpu-check: the PyTorch benchmark failed (see $OUT/torch.err)" >&2
  python3 - "$OUT" <<'PY'
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
try:
    ours = json.loads((out / "gpu-report.json").read_text()).get("benchmark", {})
    torch = json.loads((out / "torch.json").read_text())
except Exception as e:  # report what is there
    print(f"ratio unavailable: {e}")
    sys.exit(0)
r = ours.get("tokens_per_second", 0) / max(torch["tokens_per_second"], 1e-9)
line = (f"\n## glassbox vs PyTorch eager (same GPU, same config)\n\nglassbox {ours.get('tokens_per_second', 0):.0f} tok/s, "
        f"PyTorch eager ({torch['torch']}, {torch['dtype']}) {torch['tokens_per_second']:.0f} tok/s: ratio {r:.2f}x (goal >= 1.5x)\n")
with open(out / "gpu-report.md", "a") as f:
    f.write(line)
print(line)
PY
else
  echo "gpu-check: PyTorch with CUDA not importable; no ratio" | tee -a "$OUT/gpu-report.md"
fi
echo "report: $OUT/gpu-report.md"
exit "$status"
