"""Benchmark of the Python package's audit: ``Lab(dir).verify()`` against ``glassbox verify DIR``
on the same lab, alternated in one run.

    cargo build --release -p glassbox-python --examples && cargo build --release
    maturin build --release -m python/Cargo.toml && pip install target/wheels/glassbox-*.whl
    python bench/python_verify.py target/release/examples/lab_fixture target/release/glassbox \\
        [--points 1000000] [--rounds 5]

It builds a lab with ``lab_fixture`` (a run of at least ``--points`` metric points, so the blobs
to re-hash are tens of megabytes), then times, ``--rounds`` times each and alternating which goes
first, the command line and the Python call, each with a fresh state directory (so neither
remembers a checkpoint: both do the whole first-use audit: signature, every tile, every entry,
every blob re-hashed, the index compared with the log). Both must report the same number of
entries. The figure is the ratio of the medians (the target: Python within 10%). Not a test
(``python/tests/``).
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time

import glassbox


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("fixture", help="the lab_fixture binary")
    ap.add_argument("glassbox", help="the glassbox binary")
    ap.add_argument("--points", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    cli, py = [], []
    with tempfile.TemporaryDirectory() as tmp:
        lab_dir = f"{tmp}/lab"
        out = subprocess.run(
            [args.fixture, lab_dir, "--points", str(args.points)],
            check=True,
            capture_output=True,
            text=True,
        )
        facts = json.loads(out.stdout.splitlines()[0])
        lab = glassbox.Lab(lab_dir)
        lab.runs()  # the index caught up with the log before either is timed

        def run_cli(state):
            started = time.perf_counter()
            done = subprocess.run(
                [args.glassbox, "verify", lab_dir, "--state-dir", state],
                check=True,
                capture_output=True,
                text=True,
            )
            cli.append(time.perf_counter() - started)
            assert f"{facts['entries']} entries" in done.stdout, done.stdout

        def run_py(state):
            started = time.perf_counter()
            report = lab.verify(state_dir=state)
            py.append(time.perf_counter() - started)
            assert report["entries"] == facts["entries"], report

        for i in range(args.rounds):
            order = [run_cli, run_py] if i % 2 == 0 else [run_py, run_cli]
            for j, f in enumerate(order):
                f(f"{tmp}/state-{i}-{j}")
        blobs = lab.verify(state_dir=f"{tmp}/state-last")
    print(
        json.dumps(
            {
                "entries": facts["entries"],
                "blobs": blobs["blobs"],
                "blob_bytes": blobs["blob_bytes"],
                "cli_seconds": [round(s, 3) for s in cli],
                "python_seconds": [round(s, 3) for s in py],
                "cli_median": round(statistics.median(cli), 3),
                "python_median": round(statistics.median(py), 3),
                "python_vs_cli": round(statistics.median(py) / statistics.median(cli), 3),
                "python": sys.version.split()[0],
            }
        )
    )


if __name__ == "__main__":
    main()
