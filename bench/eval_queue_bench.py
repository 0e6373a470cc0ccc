"""Training throughput while eval jobs share the queue: does an eval job cost training more than
its own compute?

What it is: one training run of a bench config (snapshots every `--checkpoint` steps), queued
with `glassbox run --enqueue` on a fresh lab and trained by real `glassbox worker` processes,
in two set-ups alternated round by round on the same machine:

- `alone`: the lab has no `[evals]`; one worker with all `--threads` trains the run.
- `evals`: the lab's `[evals] suites = ["bench-choice"]` (a multiple-choice suite drawn from the
  config's Markov source, `--items` items), so every snapshot queues an eval job at the eval
  priority while the run trains. The same one worker trains the run and takes the eval jobs
  only when no training is queued (their priority is below training's), as a lab runs with one
  worker per machine.
- `--concurrent` adds a third set-up, `evals-2w`: two workers of `--threads / 2` threads each,
  so one evaluates while the other trains, against `alone-2w`: one worker of `--threads / 2`
  threads alone. That is the machine shared, not the queue: it measures what an eval beside a
  run costs the run on these cores.

The figure: the run's training tokens/s, the median over its steps of the per-step
`throughput/tokens_per_second` the runner records (read back from the run's metric chunks on
the record), so the worker's start-up and the evaluations after the run do not enter it; and
the wall time until the queue is empty (training plus every evaluation).

What it is not: a test (it asserts nothing about the figure), nor a measure of eval speed
(`bench/eval_bench.py`).

Usage (the release binary):
    cargo build --release
    python3 bench/eval_queue_bench.py --config default --steps 300 --checkpoint 50 \\
        --items 2000 --threads 2 --rounds 3 [--concurrent]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cmd, env, cwd, capture=True):
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=capture, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({done.returncode}):\n{(done.stderr or '')[-3000:]}")
    return done.stdout


def spec_for(config, steps, checkpoint, out):
    """The bench config with its steps and snapshot interval set (everything else as it is)."""
    text = open(os.path.join(ROOT, "bench", "configs", f"{config}.toml")).read()
    lines, in_train = [], False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("["):
            in_train = stripped == "[train]"
        if in_train and (stripped.startswith("steps") or stripped.startswith("checkpoint_interval")):
            continue
        lines.append(line)
        if stripped == "[train]":
            lines.append(f"steps = {steps}")
            lines.append(f"checkpoint_interval = {checkpoint}")
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")


def lab_env(work, db_name):
    env = dict(os.environ)
    env["GLASSBOX_DATABASE_URL"] = f"sqlite://{os.path.join(work, db_name)}"
    env["GLASSBOX_CONFIG"] = os.path.join(work, "lab.toml")
    env["GLASSBOX_PEAK_GFLOPS"] = "100"
    return env


def one(binary, work, spec, suite, evals, workers, threads, label):
    """A fresh lab, one queued run, `workers` workers of `threads` threads until the queue is
    empty. Returns the run's median per-step tokens/s, its steps, the eval jobs' count and the
    wall time."""
    d = tempfile.mkdtemp(prefix=f"{label}-", dir=work)
    with open(os.path.join(d, "lab.toml"), "w") as f:
        f.write("[worker]\nmetrics_flush_steps = 50\n")
        if evals:
            f.write('[evals]\nsuites = ["bench-choice"]\n')
    env = lab_env(d, "queue.db")
    lab = ["--lab", os.path.join(d, "lab")]
    run([binary, "init", *lab], env, d)
    if evals:
        run([binary, "data", "eval-suite", "import", suite, "--name", "bench-choice",
             "--kind", "multiple-choice", *lab], env, d)
    run([binary, "run", spec, "--enqueue", "--json", *lab], env, d)
    start = time.monotonic()
    procs = [
        subprocess.Popen(
            [binary, "worker", "--exit-when-idle", "--threads", str(threads), "--id", f"w{i}", *lab],
            cwd=d, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for i in range(workers)
    ]
    for p in procs:
        _, err = p.communicate()
        if p.returncode != 0:
            sys.exit(f"worker failed ({p.returncode}):\n{err[-3000:]}")
    wall = time.monotonic() - start
    jobs = json.loads(run([binary, "jobs", "--json", *lab], env, d))
    evals_done = [j for j in jobs if j["kind"] == "eval"]
    bad = [j for j in jobs if j["state"] != "succeeded"]
    if bad:
        sys.exit(f"{label}: jobs did not succeed: {bad}")
    tps = []
    rows = json.loads(run([binary, "ledger", "log", "--kind", "artifact", "--json", *lab], env, d))
    for row in rows:
        body = row.get("body") or row.get("entry", {}).get("body") or {}
        name = body.get("name", "")
        if not name.startswith("metrics/"):
            continue
        refs = row.get("refs") or row.get("entry", {}).get("refs") or {}
        blob = refs.get("metrics") or refs.get("artifact", "")
        hexd = blob.split(":", 1)[1]
        with open(os.path.join(d, "lab", "blobs", hexd[:2], hexd[2:])) as f:
            for line in f:
                rec = json.loads(line)
                v = (rec.get("scalars") or {}).get("throughput/tokens_per_second")
                if v is not None:
                    tps.append(v)
    if not tps:
        sys.exit(f"{label}: no throughput/tokens_per_second in the run's metric chunks")
    return statistics.median(tps), len(tps), len(evals_done), wall


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--glassbox", default=os.path.join(ROOT, "target", "release", "glassbox"))
    ap.add_argument("--config", default="default")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--checkpoint", type=int, default=50)
    ap.add_argument("--items", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--concurrent", action="store_true")
    ap.add_argument("--workdir")
    args = ap.parse_args()
    binary = os.path.abspath(args.glassbox)
    work = args.workdir or tempfile.mkdtemp(prefix="glassbox-eval-queue-")
    os.makedirs(work, exist_ok=True)
    spec = os.path.join(work, "spec.toml")
    spec_for(args.config, args.steps, args.checkpoint, spec)
    suite = os.path.join(work, "suite.jsonl")
    run([binary, "data", "eval-suite", "generate", "--from", spec, "--kind", "multiple-choice",
         "--items", str(args.items), "--out", suite], dict(os.environ), work)

    setups = [("alone", False, 1, args.threads), ("evals", True, 1, args.threads)]
    if args.concurrent:
        half = max(1, args.threads // 2)
        setups += [("alone-2w", False, 1, half), ("evals-2w", True, 2, half)]
    got = {name: [] for name, *_ in setups}
    for r in range(args.rounds):
        order = setups if r % 2 == 0 else list(reversed(setups))
        for name, evals, workers, threads in order:
            tps, steps, n_evals, wall = one(binary, work, spec, suite, evals, workers, threads, name)
            got[name].append((tps, wall, n_evals))
            print(f"round {r + 1} {name:9s} tokens/s {tps:10.0f} over {steps} steps; "
                  f"{n_evals} eval jobs; queue empty after {wall:.1f} s", flush=True)

    print()
    print(f"config {args.config}, {args.steps} steps, snapshots every {args.checkpoint}, "
          f"{args.items} items, {args.threads} threads, {args.rounds} rounds (medians)")
    print("| set-up | workers x threads | eval jobs | training tokens/s | vs its baseline | queue empty after |")
    print("|---|---|---|---|---|---|")
    base = {"alone": "alone", "evals": "alone", "alone-2w": "alone-2w", "evals-2w": "alone-2w"}
    for name, evals, workers, threads in setups:
        tps = statistics.median(x[0] for x in got[name])
        wall = statistics.median(x[1] for x in got[name])
        ref = statistics.median(x[0] for x in got[base[name]])
        print(f"| {name} | {workers} x {threads} | {got[name][0][2]} | {tps:,.0f} | "
              f"{tps / ref:.3f} | {wall:.1f} s |")


if __name__ == "__main__":
    main()
