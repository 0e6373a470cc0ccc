"""Fixtures of the Python package's tests: labs made by ``examples/lab_fixture.rs``.

The fixture program is ``$GLASSBOX_LAB_FIXTURE`` (``cargo xtask test`` builds it and sets
it), else it is run through ``cargo run --example lab_fixture``. ``small_lab`` also serves the
dashboard's JSON API over the same lab (the router ``glassbox serve`` runs) and publishes it
to a bucket on moto's S3 server, so rows can be compared across the three sources. Not the tests themselves (``test_lab.py``).
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def fixture_command():
    exe = os.environ.get("GLASSBOX_LAB_FIXTURE")
    if exe:
        return [exe]
    return ["cargo", "run", "--quiet", "-p", "glassbox-python", "--example", "lab_fixture", "--"]


def make_lab(dir, points, serve=False, bucket=None):
    """Builds a lab in ``dir`` (published to ``bucket`` when given); returns (facts, process
    or None)."""
    cmd = fixture_command() + [str(dir), "--points", str(points)]
    if bucket:
        cmd += ["--bucket", bucket]
    if serve:
        cmd.append("--serve")
    proc = subprocess.Popen(
        cmd, cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    facts = json.loads(proc.stdout.readline())
    if not serve:
        assert proc.wait() == 0
        return facts, None
    line = proc.stdout.readline().strip()
    assert line.startswith("serving "), line
    facts["api"] = line.split(" ", 1)[1]
    return facts, proc


@pytest.fixture(scope="session")
def s3_server():
    """moto's S3 server on a free loopback port (the virtualenv's ``moto_server``), with the
    ``AWS_*`` variables of this process pointing at it; stopped at the end of the session."""
    exe = shutil.which("moto_server") or str(Path(sys.executable).with_name("moto_server"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [exe, "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert proc.poll() is None, "moto_server exited"
            assert time.monotonic() < deadline, f"moto_server did not listen on {port}"
            time.sleep(0.1)
    os.environ.update(
        AWS_ENDPOINT_URL=endpoint,
        AWS_REGION="us-east-1",
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
    )
    yield endpoint
    proc.kill()
    proc.wait()


def create_bucket(endpoint, name):
    """Creates bucket ``name`` (moto does not check signatures: a plain PUT)."""
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/{name}", method="PUT")).close()


@pytest.fixture(scope="session")
def small_lab(tmp_path_factory, s3_server):
    """A lab of three experiments and two runs (1,000 points), published to the bucket
    ``s3://glassbox-test/lab`` (``bucket``) and with its JSON API served (``api``)."""
    create_bucket(s3_server, "glassbox-test")
    bucket = "s3://glassbox-test/lab"
    facts, proc = make_lab(
        tmp_path_factory.mktemp("small") / "lab", 1000, serve=True, bucket=bucket
    )
    facts["bucket"] = bucket
    yield facts
    proc.stdin.close()
    proc.wait(timeout=30)


@pytest.fixture(scope="session")
def big_lab(tmp_path_factory):
    """A lab whose run-1 recorded at least a million metric points."""
    facts, _ = make_lab(tmp_path_factory.mktemp("big") / "lab", 1_000_000)
    return facts


@pytest.fixture
def lab_copy(small_lab, tmp_path):
    """A copy of the small lab that a test may damage."""
    dest = tmp_path / "lab"
    shutil.copytree(small_lab["lab"], dest)
    return dest


@pytest.fixture
def state_dir(tmp_path):
    """The auditor's memory of checkpoints seen, fresh for each test."""
    return tmp_path / "state"
