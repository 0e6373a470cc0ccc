"""Benchmark of the Python package: a run's metrics into a pandas DataFrame, ``glassbox`` against
the JSON API read by hand (the peer a researcher writes today).

    cargo build -p glassbox-python --examples
    python bench/python_metrics.py target/debug/examples/lab_fixture [--points 1000000]

It builds a lab with ``lab_fixture`` (a run of at least ``--points`` metric points), serves its
dashboard router, and times, in one run, three times each (median reported):

- ``glassbox``: ``Lab(dir).metrics(run).to_pandas()`` (every point, from the metric chunks);
- the peer: ``/api/v1/runs/{run}/metrics`` for the names, then each metric's series paged by step
  range at the API's most points per request (100,000, so nothing is downsampled), with
  ``requests`` when it is installed (else ``urllib``), and the frame built from the rows.

Both must yield the same number of points. Not a test (``python/tests/``); needs the
``glassbox`` wheel, pandas, and the fixture binary.
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse

import pandas as pd

import glassbox

try:
    import requests
except ImportError:  # the peer then uses the standard library
    requests = None


def get_json(url):
    if requests is not None:
        r = requests.get(url, timeout=120)
        r.raise_for_status()
        return r.json()
    import urllib.request

    with urllib.request.urlopen(url, timeout=120) as r:
        return json.load(r)


def by_hand(base, run, steps):
    """Every point of every metric through the JSON API, into a long DataFrame."""
    names = get_json(f"{base}/api/v1/runs/{run}/metrics")["names"]
    page = 100_000
    rows = []
    for name in names:
        path = urllib.parse.quote(name, safe="/")
        for start in range(0, steps + 1, page):
            q = urllib.parse.urlencode({"from": start, "to": start + page - 1, "max_points": page})
            try:
                series = get_json(f"{base}/api/v1/runs/{run}/metrics/{path}?{q}")
            except Exception as e:  # a range with no point is a 404
                if "404" in str(e):
                    continue
                raise
            rows.extend((run, name, s, v) for s, v in series["points"])
    return pd.DataFrame(rows, columns=["run", "name", "step", "value"])


def timed(f, times=3):
    seconds, out = [], None
    for _ in range(times):
        started = time.perf_counter()
        out = f()
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds), out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("fixture", help="the lab_fixture binary")
    ap.add_argument("--points", type=int, default=1_000_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        lab_dir = f"{tmp}/lab"
        proc = subprocess.Popen(
            [args.fixture, lab_dir, "--points", str(args.points), "--serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        facts = json.loads(proc.stdout.readline())
        base = proc.stdout.readline().strip().split(" ", 1)[1]
        try:
            lab = glassbox.Lab(lab_dir)
            ours, df = timed(lambda: lab.metrics(facts["run"]).to_pandas())
            peer, df_peer = timed(lambda: by_hand(base, facts["run"], facts["steps"]))
        finally:
            proc.stdin.close()
            proc.wait(timeout=60)
    assert len(df) == len(df_peer) == facts["points"], (len(df), len(df_peer), facts["points"])
    print(
        json.dumps(
            {
                "points": len(df),
                "glassbox_seconds": round(ours, 3),
                "json_api_by_hand_seconds": round(peer, 3),
                "peer_client": "requests" if requests is not None else "urllib",
                "speedup": round(peer / ours, 1),
                "python": sys.version.split()[0],
            }
        )
    )


if __name__ == "__main__":
    main()
