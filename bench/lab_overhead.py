"""The lab's cost on a training run: `glassbox run` through the lab against the bare runner.

Usage (from the repository root):
    cargo build --release --bin glassbox
    python3 bench/lab_overhead.py [--glassbox target/release/glassbox] [--pairs 20]
        [--spec examples/tiny.toml] [--workdir DIR]

Each pair runs the bare runner (`--no-ledger`) and then the same spec through one lab that
grows across the pairs (proposal, approval, queue, run_started, metric chunks, checkpoint,
result), alternated so the machine's drift falls on both alike. Each run is timed from process
start to exit. Prints both series, the mean ratio, and the median and range of the per-pair
ratios. This is a benchmark, not a test: it asserts nothing about the figure.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time


def timed(cmd, cwd):
    start = time.monotonic()
    done = subprocess.run(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    took = time.monotonic() - start
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr.decode()[-2000:]}")
    return took


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--glassbox", default="target/release/glassbox")
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--spec", default="examples/tiny.toml")
    ap.add_argument("--workdir", help="where runs and the lab go (default: a temporary directory)")
    args = ap.parse_args()
    binary = os.path.abspath(args.glassbox)
    spec = os.path.abspath(args.spec)
    work = args.workdir or tempfile.mkdtemp(prefix="glassbox-lab-overhead-")
    os.makedirs(work, exist_ok=True)
    common = ["--threads", "2", "--peak-gflops", "100", "--json"]
    bare, lab = [], []
    for i in range(args.pairs):
        bare.append(timed([binary, "run", spec, "--no-ledger", "--out", f"bare{i}", *common], work))
        lab.append(timed([binary, "run", spec, "--lab", "lab", "--out", f"lab{i}", *common], work))
    pairs = [(l / b - 1) * 100 for b, l in zip(bare, lab)]
    print("bare (s):", " ".join(f"{x:.3f}" for x in bare), f"mean {statistics.mean(bare):.3f}")
    print("lab  (s):", " ".join(f"{x:.3f}" for x in lab), f"mean {statistics.mean(lab):.3f}")
    print(
        f"lab vs bare: mean {(statistics.mean(lab) / statistics.mean(bare) - 1) * 100:+.1f}%, "
        f"median of pairs {statistics.median(pairs):+.1f}%, "
        f"pairs {min(pairs):+.1f}% .. {max(pairs):+.1f}% ({args.pairs} pairs; lab in {work}/lab)"
    )


if __name__ == "__main__":
    main()
