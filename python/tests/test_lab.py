"""Tests of the ``glassbox`` Python package against labs made in the test (``conftest.py``):
the same rows as the JSON API, every metric point, the auditor's verdicts on a damaged lab,
proofs checked offline, and the errors a user sees. Not a benchmark (``bench/``).
"""

import json
import math
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

import glassbox

QUERIES = [
    None,
    "status = succeeded",
    "tag = ladder",
    "model.d_model >= 48",
    'metrics."train/loss" < 2',
    "not author = bob",
    "diverges",
]


def api(base, path, **params):
    query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
    with urllib.request.urlopen(f"{base}{path}?{query}", timeout=30) as r:
        return json.load(r)


@pytest.mark.parametrize("query", QUERIES)
def test_runs_are_the_json_apis_rows(small_lab, query):
    lab = glassbox.Lab(small_lab["lab"])
    mine = [r.to_dict() for r in lab.runs(query)]
    for row in mine:
        assert row.pop("spec") is not None
    assert mine == api(small_lab["api"], "/api/v1/runs", q=query)


@pytest.mark.parametrize("query", QUERIES)
def test_experiments_are_the_json_apis_experiments(small_lab, query):
    lab = glassbox.Lab(small_lab["lab"])
    mine = lab.experiments(query)
    page = api(small_lab["api"], "/api/v1/experiments", q=query, per_page=500, sort="id", dir="asc")
    assert [e.id for e in mine] == [row["id"] for row in page["items"]]
    assert [e.status for e in mine] == [row["status"] for row in page["items"]]


def test_a_query_selects_by_spec_field_and_status(small_lab):
    lab = glassbox.Lab(small_lab["lab"])
    assert [r.id for r in lab.runs("status = diverged")] == ["run-2"]
    assert [r.id for r in lab.runs("model.d_model = 64")] == ["run-1"]
    assert [e.id for e in lab.experiments("status = rejected")] == ["acme/lab#3"]


def test_a_bad_query_names_its_column(small_lab):
    lab = glassbox.Lab(small_lab["lab"])
    with pytest.raises(glassbox.QueryError) as e:
        lab.runs("status = succeeded and steps >")
    assert e.value.column == 31
    assert "column 31" in str(e.value)
    with pytest.raises(glassbox.QueryError, match="column"):
        lab.experiments("(tag = ladder")


def test_a_missing_lab_says_so(tmp_path):
    with pytest.raises(glassbox.LabNotFoundError, match="does not exist"):
        glassbox.Lab(tmp_path / "nowhere")
    with pytest.raises(glassbox.LabNotFoundError, match="no log/checkpoint"):
        glassbox.Lab(tmp_path)
    assert issubclass(glassbox.LabNotFoundError, glassbox.GlassboxError)


def test_rows_become_tables_with_the_spec_flattened(small_lab):
    pd = pytest.importorskip("pandas")
    lab = glassbox.Lab(small_lab["lab"])
    df = lab.runs().to_pandas()
    assert list(df["id"]) == ["run-1", "run-2"]
    assert list(df["spec.model.d_model"]) == [64, 32]
    assert list(df["spec.model.moe.n_experts"]) == [4, 4]
    assert list(df["final_metrics.train/loss"]) == [1.6, 2.9]
    table = lab.experiments().to_arrow()
    assert table.num_rows == 3
    assert table.column("spec.experiment.slug").to_pylist() == ["tiny-moe-64", "narrow-32", "wide-48"]
    assert isinstance(df, pd.DataFrame)


def test_every_metric_point_of_a_million_point_run(big_lab):
    pytest.importorskip("pandas")
    lab = glassbox.Lab(big_lab["lab"])
    started = time.perf_counter()
    df = lab.metrics("run-1").to_pandas()
    seconds = time.perf_counter() - started
    print(f"{len(df)} points into a DataFrame in {seconds:.3f} s")
    assert big_lab["points"] >= 1_000_000
    assert len(df) == big_lab["points"]
    counts = df.groupby("name", observed=True).size()
    assert set(counts) == {big_lab["steps"]}
    assert len(counts) == 8
    loss = df[df["name"] == "train/loss"]
    assert list(loss["step"][:3]) == [1, 2, 3]
    assert loss["step"].iloc[-1] == big_lab["steps"]
    assert loss["value"].iloc[0] == pytest.approx(1.5 + 2.5 * math.exp(-1 / 600))


def test_metrics_by_name_and_on_each_x_axis(small_lab):
    pytest.importorskip("pandas")
    lab = glassbox.Lab(small_lab["lab"])
    steps = small_lab["steps"]
    by_step = lab.metrics("run-1", names=["train/loss"]).to_pandas()
    assert list(by_step["step"]) == list(range(1, steps + 1))
    assert list(by_step["x"]) == [float(s) for s in range(1, steps + 1)]
    tokens = lab.metrics("run-1", names=["train/loss"], x="tokens").to_pandas()
    assert list(tokens["x"]) == [512.0 * s for s in range(1, steps + 1)]
    flops = lab.metrics("run-1", names=["train/loss"], x="flops").to_pandas()
    per_token = flops["x"] / tokens["x"]
    assert per_token.min() == per_token.max() > 0
    seconds = lab.metrics("run-1", names="train/loss", x="time").to_pandas()["x"]
    assert seconds.is_monotonic_increasing and seconds.iloc[-1] > 0
    components = lab.metrics("run-1", names=["train/router/layer_0/expert_load/3"])
    assert len(components) == steps
    with pytest.raises(ValueError, match='x = "epochs": use step, tokens, flops or time'):
        lab.metrics("run-1", x="epochs")
    with pytest.raises(glassbox.NotFoundError, match="no metric \"eval/nothing\""):
        lab.metrics("run-1", names=["eval/nothing"])
    with pytest.raises(glassbox.NotFoundError, match='no run "run-9"'):
        lab.metrics("run-9")


def test_a_diverged_steps_nan_is_a_point(small_lab):
    lab = glassbox.Lab(small_lab["lab"])
    points = list(lab.metrics("run-2", names=["train/loss"]))
    assert len(points) == 121
    assert points[0][:2] == ("run-2", "train/loss")
    assert math.isnan(points[-1][3])


def test_metrics_to_arrow_holds_every_point(small_lab):
    pytest.importorskip("pyarrow")
    lab = glassbox.Lab(small_lab["lab"])
    m = lab.metrics("run-1")
    table = m.to_arrow()
    assert table.num_rows == len(m) == small_lab["points"]
    assert table.column_names == ["run", "name", "step", "x", "value"]
    assert table.column("name").to_pylist()[0] == "optim/learning_rate"


def test_summary(small_lab):
    lab = glassbox.Lab(small_lab["lab"])
    s = lab.summary("run-2")
    assert s["run"]["status"] == "diverged"
    loss = s["metrics"]["train/loss"]
    assert (loss["points"], loss["first_step"], loss["last_step"]) == (121, 1, 121)
    assert loss["last"] is None and loss["min"] > 1.5


def test_entries_entry_blob_and_spec(small_lab):
    lab = glassbox.Lab(small_lab["lab"])
    entries = lab.entries()
    assert len(entries) == small_lab["entries"]
    assert [e.run for e in lab.entries(kind="result")] == ["run-1", "run-2"]
    results = lab.entries(kind="result").to_pandas()
    assert list(results["body.status"]) == ["succeeded", "diverged"]
    assert list(results["body.final_metrics.train/loss"]) == [1.6, 2.9]
    assert list(results["run"]) == ["run-1", "run-2"] and "raw" not in results.columns
    proposals = lab.entries(kind="proposal").to_arrow()
    assert proposals.column("body.author").to_pylist() == ["alice", "alice", "bob"]
    assert proposals.column("refs.spec").to_pylist()[0].startswith("blake3:")
    assert all(e.idx >= 3 for e in lab.entries(since=3))
    first = lab.entry(0)
    assert first.kind == "proposal" and first.experiment == "acme/lab#1"
    assert first == entries[0]
    spec_blob = first.entry["refs"]["spec"]
    assert b'slug = "tiny-moe-64"' in lab.blob(spec_blob)
    spec = lab.spec("acme/lab#1")
    assert spec["model"]["moe"]["n_experts"] == 4 and spec["train"]["steps"] == 300
    with pytest.raises(ValueError, match="not an entry kind"):
        lab.entries(kind="resutl")
    with pytest.raises(glassbox.NotFoundError, match="the log has"):
        lab.entry(10_000)
    with pytest.raises(glassbox.NotFoundError):
        lab.blob("blake3:" + "0" * 64)
    with pytest.raises(ValueError):
        lab.blob("sha256:abc")


def test_an_inclusion_proof_checks_offline(small_lab):
    lab = glassbox.Lab(small_lab["lab"])
    vkey = small_lab["vkey"]
    for i in (0, small_lab["entries"] - 1):
        proof = lab.proof(i)
        glassbox.verify_inclusion(lab.entry(i), proof, vkey=vkey)
    proof = lab.proof(2)
    with pytest.raises(glassbox.VerificationError, match="entry 2 is not in the tree"):
        proof.verify(lab.entry(3).raw)
    api_proof = api(small_lab["api"], "/api/v1/entries/2/proof")
    glassbox.verify_inclusion(lab.entry(2), api_proof, vkey=vkey)
    other_key = "other+00000000+AQ" + "A" * 42 + "="
    with pytest.raises(glassbox.VerificationError):
        glassbox.verify_inclusion(lab.entry(2), proof, vkey=other_key)


def test_verify_passes_on_a_sound_lab(lab_copy, state_dir):
    report = glassbox.Lab(lab_copy).verify(state_dir=state_dir)
    assert report["entries"] == report["size"] > 0
    assert report["index"] == "matches"
    assert report["key_source"] == "from the lab, trusted on first use"


def test_verify_checks_the_witnesses_quorum(small_lab, lab_copy, state_dir):
    lab = glassbox.Lab(lab_copy)
    witness, absent = small_lab["witness"], small_lab["absent_witness"]
    report = lab.verify(state_dir=state_dir, witnesses=[witness])
    assert report["cosigned"] == {
        "witnesses": ["witness.test.example"],
        "missing": [],
        "quorum": 1,
    }
    assert glassbox.Lab(lab_copy).verify(state_dir=state_dir)["cosigned"] is None
    report = lab.verify(state_dir=state_dir, witnesses=[witness, absent], quorum=1)
    assert report["cosigned"]["missing"] == ["absent.test.example"]
    with pytest.raises(glassbox.VerificationError, match="lacks its witnesses' quorum"):
        lab.verify(state_dir=state_dir, witnesses=[witness, absent])
    with pytest.raises(ValueError, match="quorum = 3: must be between 1 and the number of witnesses"):
        lab.verify(state_dir=state_dir, witnesses=[witness, absent], quorum=3)
    with pytest.raises(ValueError, match='witnesses: "not-a-key"'):
        lab.verify(state_dir=state_dir, witnesses=["not-a-key"])


def test_a_tampered_blob_is_named(lab_copy, state_dir):
    lab = glassbox.Lab(lab_copy)
    spec_blob = lab.entry(0).entry["refs"]["spec"]
    hexdigits = spec_blob.split(":", 1)[1]
    path = Path(lab_copy) / "blobs" / hexdigits[:2] / hexdigits[2:]
    path.chmod(0o644)
    path.write_bytes(path.read_bytes().replace(b"Tiny MoE", b"Tiny MoF"))
    with pytest.raises(glassbox.VerificationError, match=f"blob {spec_blob}"):
        lab.verify(state_dir=state_dir)
    with pytest.raises(glassbox.VerificationError, match="hashes to"):
        lab.blob(spec_blob)


@pytest.mark.parametrize("tile", ["tile/0", "tile/entries"])
def test_a_tampered_tile_is_named(lab_copy, state_dir, tile):
    (path,) = [p for p in (Path(lab_copy) / "log" / tile).rglob("*") if p.is_file()]
    path.chmod(0o644)
    data = bytearray(path.read_bytes())
    data[40] ^= 1
    path.write_bytes(bytes(data))
    lab = glassbox.Lab(lab_copy)
    with pytest.raises(glassbox.VerificationError) as e:
        lab.verify(state_dir=state_dir)
    # Both name the tile: a hash tile by its path, a damaged entry bundle by the entry and the
    # bundle holding it.
    assert str(path.relative_to(lab_copy)) in str(e.value), str(e.value)


def test_reads_release_the_gil(big_lab):
    lab = glassbox.Lab(big_lab["lab"])
    done = threading.Event()
    elapsed = []

    def read():
        started = time.perf_counter()
        lab.metrics("run-1")
        elapsed.append(time.perf_counter() - started)
        done.set()

    worker = threading.Thread(target=read)
    worker.start()
    ticks, last, longest = 0, time.perf_counter(), 0.0
    while not done.is_set():
        now = time.perf_counter()
        longest = max(longest, now - last)
        last = now
        ticks += 1
        time.sleep(0.001)
    worker.join()
    # Holding the GIL for the whole read would stall this loop for about as long as the read.
    assert elapsed[0] > 0.05
    assert longest < elapsed[0] / 2, (longest, elapsed[0])


@pytest.mark.parametrize("source", ["api", "bucket"])
def test_a_server_and_a_bucket_give_the_same_rows_points_and_verdicts(
    small_lab, state_dir, source
):
    local = glassbox.Lab(small_lab["lab"])
    remote = glassbox.Lab(small_lab[source])
    for query in QUERIES:
        assert [r.to_dict() for r in remote.runs(query)] == [r.to_dict() for r in local.runs(query)]
        assert [e.to_dict() for e in remote.experiments(query)] == [
            e.to_dict() for e in local.experiments(query)
        ]
    mine, theirs = local.metrics("run-1", x="flops"), remote.metrics("run-1", x="flops")
    assert len(theirs) == small_lab["points"]
    assert list(theirs) == list(mine)
    assert remote.entries() == local.entries()
    assert remote.entries(kind="result", since=5) == local.entries(kind="result", since=5)
    assert remote.entry(3) == local.entry(3)
    assert remote.proof(3) == local.proof(3)
    assert remote.summary("run-2") == local.summary("run-2")
    assert remote.spec("acme/lab#2") == local.spec("acme/lab#2")
    blob = local.entry(0).entry["refs"]["spec"]
    assert remote.blob(blob) == local.blob(blob)
    report = remote.verify(state_dir=state_dir, witnesses=[small_lab["witness"]])
    assert report["entries"] == small_lab["entries"]
    assert report["blobs"] == local.verify(state_dir=state_dir)["blobs"] > 0
    with pytest.raises(glassbox.QueryError, match="column 8"):
        remote.runs("steps >")


def test_a_bucket_without_a_lab_says_so(small_lab):
    with pytest.raises(glassbox.LabNotFoundError, match="no lab at s3://glassbox-test/nothing"):
        glassbox.Lab("s3://glassbox-test/nothing")
    with pytest.raises(ValueError, match="use a lab directory, s3://bucket/prefix or the http"):
        glassbox.Lab("ftp://example.org/lab")


def test_a_server_without_a_lab_says_so(small_lab):
    with pytest.raises(glassbox.LabNotFoundError, match="serves no log/checkpoint"):
        glassbox.Lab(small_lab["api"] + "/nothing-here")
