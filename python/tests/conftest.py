"""Fixtures of the Python package's tests: labs made by ``examples/lab_fixture.rs``.

The fixture program is ``$GLASSBOX_LAB_FIXTURE`` (``cargo xtask test`` builds it and sets
it), else it is run through ``cargo run --example lab_fixture``. ``small_lab`` also serves the
dashboard's JSON API over the same lab (the router ``glassbox serve`` runs), so rows can be
compared with what the API answers. Not the tests themselves (``test_lab.py``).
"""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def fixture_command():
    exe = os.environ.get("GLASSBOX_LAB_FIXTURE")
    if exe:
        return [exe]
    return ["cargo", "run", "--quiet", "-p", "glassbox-python", "--example", "lab_fixture", "--"]


def make_lab(dir, points, serve=False):
    """Builds a lab in ``dir``; returns (facts, process or None)."""
    cmd = fixture_command() + [str(dir), "--points", str(points)]
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
def small_lab(tmp_path_factory):
    """A lab of three experiments and two runs (1,000 points), with its JSON API served."""
    facts, proc = make_lab(tmp_path_factory.mktemp("small") / "lab", 1000, serve=True)
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
