"""Runner vs JAX on the three issue-4 configs, in one run: tokens/s, MFU, peak RSS.

Usage (from the repository root):
    cargo build --release -p glassbox-runner --features bench --example bench
    python3 bench/compare.py [--bench target/release/examples/bench] [--configs small,default,large]
glassbox's figure is the median per-step tokens/s of steps 3..20 (the trainer's own timing);
JAX's is N steps after one compile step, timed as a whole. Both on 2 threads.
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run_glassbox(binary, cfg):
    spec = os.path.join(HERE, "configs", f"{cfg}.toml")
    res = subprocess.run([binary, spec, "2"], capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def run_jax(cfg, steps):
    env = dict(os.environ)
    env["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=true intra_op_parallelism_threads=2"
    env["JAX_PLATFORMS"] = "cpu"
    spec = os.path.join(HERE, "configs", f"{cfg}.toml")
    cmd = ["/usr/bin/time", "-f", "%M", sys.executable, os.path.join(HERE, "moe_jax.py"), spec, str(steps)]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    out = json.loads(res.stdout.strip().splitlines()[-1])
    out["peak_rss_mib"] = int(res.stderr.strip().splitlines()[-1]) / 1024
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", default="target/release/examples/bench")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--configs", default="small,default,large")
    a = ap.parse_args()
    print("| config | glassbox tok/s | JAX tok/s | ratio | glassbox MFU | glassbox peak RSS | JAX peak RSS |")
    print("|---|---|---|---|---|---|---|")
    for cfg in a.configs.split(","):
        g = run_glassbox(a.bench, cfg)
        j = run_jax(cfg, a.steps)
        print(
            f"| {cfg} | {g['tokens_per_second']:.0f} | {j['tokens_per_second']:.0f} | "
            f"{g['tokens_per_second'] / j['tokens_per_second']:.2f}x | {100 * g['mfu']:.1f}% of "
            f"{g['peak_gflops']:.1f} GFLOP/s | {g['peak_rss_mib']:.0f} MiB | {j['peak_rss_mib']:.0f} MiB |",
            flush=True,
        )


if __name__ == "__main__":
    main()
