"""Runner vs JAX on the benchmark configs, alternated in one run: tokens/s, ratios, MFU, RSS.

Not a test and not a profiler: it runs whole processes and reads the one JSON line each prints.

Usage (from the repository root):
    cargo build --release -p glassbox-runner --features bench --example bench
    python3 bench/compare.py [--bench target/release/examples/bench] [--python PYTHON]
        [--configs small,default,large] [--variants blocked,ragged] [--pairs 3]

For each config it runs, `--pairs` times over: glassbox, then each JAX dispatch variant
(`bench/moe_jax.py`: `blocked` is the MegaBlocks-style peer, `ragged` is `jax.lax.ragged_dot`).
Alternating means a burst of load from elsewhere on a shared machine hits both sides of a pair;
the ratio per pair and the median of those ratios are what count. glassbox's figure is the
median per-step tokens/s of steps 3..20 (the trainer's own timing; `wall` is the same steps'
tokens over their summed time); JAX's is N steps after one compile step, timed as a whole. Both
on 2 threads. `--python` is the interpreter that has jax (e.g. a venv outside the repository).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run_glassbox(binary, cfg):
    spec = os.path.join(HERE, "configs", f"{cfg}.toml")
    res = subprocess.run([binary, spec, "2"], capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def run_jax(python, cfg, steps, variant):
    env = dict(os.environ)
    env["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=true intra_op_parallelism_threads=2"
    env["JAX_PLATFORMS"] = "cpu"
    spec = os.path.join(HERE, "configs", f"{cfg}.toml")
    cmd = ["/usr/bin/time", "-f", "%M", python, os.path.join(HERE, "moe_jax.py"), spec, str(steps), variant]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    out = json.loads(res.stdout.strip().splitlines()[-1])
    out["peak_rss_mib"] = int(res.stderr.strip().splitlines()[-1]) / 1024
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", default="target/release/examples/bench")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--configs", default="small,default,large")
    ap.add_argument("--variants", default="blocked,ragged")
    ap.add_argument("--pairs", type=int, default=3)
    a = ap.parse_args()
    variants = a.variants.split(",")
    for cfg in a.configs.split(","):
        g, j = [], {v: [] for v in variants}
        for i in range(a.pairs):
            g.append(run_glassbox(a.bench, cfg))
            line = f"{cfg} pair {i + 1}: glassbox {g[-1]['tokens_per_second']:.0f}"
            for v in variants:
                j[v].append(run_jax(a.python, cfg, a.steps, v))
                line += f", jax-{v} {j[v][-1]['tokens_per_second']:.0f}"
            print(line + " tok/s", file=sys.stderr, flush=True)
        gt = [r["tokens_per_second"] for r in g]
        gw = [r.get("tokens_per_second_wall", float("nan")) for r in g]
        print(f"\n### {cfg}\n")
        print(f"glassbox tok/s: {' / '.join(f'{x:.0f}' for x in gt)} (median {statistics.median(gt):.0f}); "
              f"wall: {' / '.join(f'{x:.0f}' for x in gw)}")
        mfu = " / ".join(f"{100 * r['mfu']:.1f}%" for r in g)
        peak = " / ".join(f"{r['peak_gflops']:.1f}" for r in g)
        rss = max(r["peak_rss_mib"] for r in g)
        print(f"glassbox MFU: {mfu} of {peak} GFLOP/s; peak RSS {rss:.0f} MiB\n")
        print("| peer | peer tok/s per run | ratio per pair | median ratio | peer peak RSS |")
        print("|---|---|---|---|---|")
        for v in variants:
            jt = [r["tokens_per_second"] for r in j[v]]
            ratios = [x / y for x, y in zip(gt, jt)]
            print(f"| jax {v} | {' / '.join(f'{x:.0f}' for x in jt)} | "
                  f"{' / '.join(f'{x:.2f}' for x in ratios)} | **{statistics.median(ratios):.2f}x** | "
                  f"{max(r['peak_rss_mib'] for r in j[v]):.0f} MiB |", flush=True)


if __name__ == "__main__":
    main()
