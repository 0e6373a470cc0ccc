"""glassbox: read a glassbox lab into Python, pandas and Arrow, and verify its record.

The reading, the run search and the audit are the project's own Rust code (the crates the
``glassbox`` command line and dashboard are built from), compiled into ``glassbox._glassbox``;
this module turns what it returns into typed objects and DataFrames.

    import glassbox
    lab = glassbox.Lab("./glassbox-lab")
    runs = lab.runs("status = succeeded and model.moe.n_experts >= 4").to_pandas()
    loss = lab.metrics("run-1", names=["train/loss"], x="tokens").to_pandas()
    lab.verify()   # raises glassbox.VerificationError naming the first bad item

Not here: training, serving or writing a lab (the ``glassbox`` binary does those). A source
is a lab directory, the bucket a lab publishes to (``s3://bucket/prefix``) or a running
``glassbox serve`` (``http://...``).
pandas and pyarrow are optional: only ``to_pandas()`` and ``to_arrow()`` import them.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from . import _glassbox
from ._glassbox import (
    GlassboxError,
    LabNotFoundError,
    NotFoundError,
    QueryError,
    VerificationError,
)

__version__ = _glassbox.__version__

__all__ = [
    "Lab",
    "Run",
    "Experiment",
    "Entry",
    "InclusionProof",
    "Metrics",
    "Rows",
    "verify_inclusion",
    "GlassboxError",
    "LabNotFoundError",
    "NotFoundError",
    "QueryError",
    "VerificationError",
]

X_AXES = ("step", "tokens", "flops", "time")


def _flatten(row: Dict[str, Any], prefix: str = "") -> Dict[str, Any]:
    """Nested dicts as dotted columns (``spec.model.d_model``); lists stay values."""
    out: Dict[str, Any] = {}
    for key, value in row.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(_flatten(value, name + "."))
        else:
            out[name] = value
    return out


def _need(module: str, extra: str) -> Any:
    try:
        return __import__(module)
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            f"this needs {module}: pip install {module} (or 'glassbox[{extra}]')"
        ) from e


@dataclasses.dataclass(frozen=True)
class Run:
    """One run, as the dashboard's JSON API (``/api/v1/runs``) gives it, with its spec."""

    id: str
    experiment: Optional[str]
    spec_hash: str
    status: str
    steps: Optional[int]
    started_entry: Optional[int]
    result_entry: Optional[int]
    started: Optional[str]
    ended: Optional[str]
    backend: Optional[str]
    hardware: Optional[str]
    final_metrics: Dict[str, float]
    forecast: Optional[Dict[str, Any]]
    reason: Optional[str]
    tokenizer: Optional[str]
    shards: Dict[str, str]
    anomalies: int
    spec: Optional[Dict[str, Any]] = None
    extra: Dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> Dict[str, Any]:
        """The row as the API spells it (``extra`` merged back), spec included."""
        d = dataclasses.asdict(self)
        d.update(d.pop("extra"))
        return d


@dataclasses.dataclass(frozen=True)
class Experiment:
    """One experiment, as the catalog lists it, with its status and current spec."""

    id: str
    title: Optional[str]
    author: Optional[str]
    status: str
    spec_hash: Optional[str]
    spec_blob: Optional[str]
    issue_url: Optional[str]
    approved_by: Optional[str]
    rejected: Optional[str]
    runs: List[str]
    forecasts: List[int]
    first_entry: int
    last_entry: int
    updated: str
    sweep: Optional[Dict[str, Any]] = None
    spec: Optional[Dict[str, Any]] = None
    extra: Dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> Dict[str, Any]:
        """The row with ``extra`` merged back."""
        d = dataclasses.asdict(self)
        d.update(d.pop("extra"))
        return d


def _typed(cls: Any, row: Dict[str, Any]) -> Any:
    names = {f.name for f in dataclasses.fields(cls)}
    known = {k: v for k, v in row.items() if k in names and k != "extra"}
    extra = {k: v for k, v in row.items() if k not in names}
    for f in dataclasses.fields(cls):
        if f.name not in known and f.name != "extra":
            known[f.name] = None
    return cls(**known, extra=extra)


class Rows(list):
    """A list of rows (``Run``, ``Experiment`` or ``Entry``) that also becomes a table.

    ``to_pandas()`` and ``to_arrow()`` flatten nested fields into dotted columns:
    ``spec.model.moe.n_experts``, ``final_metrics.train/loss``. The catalog's own summary of
    the spec (an experiment's ``extra['spec']`` facts) is replaced by the full spec.
    """

    def records(self) -> List[Dict[str, Any]]:
        """Each row as one flat dict."""
        return [_flatten(r.to_dict()) for r in self]

    def to_pandas(self) -> Any:
        """A pandas DataFrame, one row per item, nested fields as dotted columns."""
        pd = _need("pandas", "pandas")
        return pd.DataFrame.from_records(self.records())

    def to_arrow(self) -> Any:
        """A pyarrow Table, one row per item, nested fields as dotted columns."""
        pa = _need("pyarrow", "arrow")
        records = self.records()
        columns: Dict[str, None] = {}
        for r in records:
            for k in r:
                columns.setdefault(k, None)
        return pa.table({c: [r.get(c) for r in records] for c in columns})


@dataclasses.dataclass(frozen=True)
class Entry:
    """A ledger entry: where it sits in the log, what it is about, its body, its bytes."""

    idx: int
    kind: str
    experiment: Optional[str]
    run: Optional[str]
    time: str
    entry: Dict[str, Any]
    raw: bytes

    def to_dict(self) -> Dict[str, Any]:
        """The entry as a table row: where it sits, then its ``refs`` and ``body`` (which
        ``Rows.to_pandas()`` flattens into ``refs.<role>`` and ``body.<field>`` columns);
        not its bytes."""
        return {
            "idx": self.idx,
            "kind": self.kind,
            "experiment": self.experiment,
            "run": self.run,
            "time": self.time,
            "refs": self.entry.get("refs", {}),
            "body": self.entry.get("body", {}),
        }

    @staticmethod
    def _of(row: Dict[str, Any]) -> "Entry":
        return Entry(
            idx=row["idx"],
            kind=row["kind"],
            experiment=row.get("experiment"),
            run=row.get("run"),
            time=row["time"],
            entry=row["entry"],
            raw=row["raw"].encode("utf-8"),
        )


@dataclasses.dataclass(frozen=True)
class InclusionProof:
    """That entry ``index`` is in the tree of ``tree_size`` entries with root ``root``."""

    index: int
    tree_size: int
    leaf_hash: str
    proof: List[str]
    root: str
    checkpoint: str

    def verify(self, entry: Union[bytes, Entry], vkey: Optional[str] = None) -> None:
        """Same as ``verify_inclusion(entry, self, vkey)``."""
        verify_inclusion(entry, self, vkey)


def verify_inclusion(
    entry: Union[bytes, Entry],
    proof: Union[InclusionProof, Dict[str, Any]],
    vkey: Optional[str] = None,
) -> None:
    """Checks offline that ``entry`` (its canonical bytes) is in the log the proof leads to.

    With ``vkey`` (the lab's verifier key, ``name+hexid+base64``), also checks the signature
    of the proof's checkpoint and that it signs the proof's size and root. Raises
    ``VerificationError`` saying which check failed; returns None when all pass. ``proof`` may
    be an ``InclusionProof`` or the JSON API's ``/api/v1/entries/{idx}/proof`` object.
    """
    raw = entry.raw if isinstance(entry, Entry) else bytes(entry)
    p = dataclasses.asdict(proof) if isinstance(proof, InclusionProof) else dict(proof)
    _glassbox.verify_inclusion(
        raw,
        int(p["index"]),
        int(p["tree_size"]),
        list(p["proof"]),
        p["root"],
        p.get("checkpoint"),
        vkey,
    )


class Metrics:
    """A run's metric points at full resolution, in long format: (run, name, x, value).

    Held as columns (numpy-compatible buffers built in Rust). ``len()`` is the number of
    points; iterating yields ``(run, name, x, value)`` tuples; ``to_pandas()`` and
    ``to_arrow()`` build a table without a Python object per point. ``x`` is what ``x=``
    asked for (``step``, ``tokens``, ``flops`` or ``time`` in seconds); ``step`` is always
    there too.
    """

    def __init__(
        self,
        run: str,
        x_axis: str,
        names: List[str],
        codes: bytes,
        steps: bytes,
        xs: bytes,
        values: bytes,
    ) -> None:
        self.run = run
        self.x_axis = x_axis
        self.names = names
        self._codes = codes
        self._steps = steps
        self._xs = xs
        self._values = values

    def __len__(self) -> int:
        return len(self._values) // 8

    def __repr__(self) -> str:
        return f"Metrics(run={self.run!r}, x={self.x_axis!r}, {len(self.names)} metrics, {len(self)} points)"

    def __iter__(self) -> Iterator[Tuple[str, str, float, float]]:
        codes = memoryview(self._codes).cast("I")
        xs = memoryview(self._xs).cast("d")
        values = memoryview(self._values).cast("d")
        for i in range(len(values)):
            yield (self.run, self.names[codes[i]], xs[i], values[i])

    def numpy(self) -> Dict[str, Any]:
        """The columns as numpy arrays (read-only views of the buffers, no copy):
        ``code`` (uint32, a position in ``names``), ``step`` (uint64), ``x``, ``value``."""
        np = _need("numpy", "pandas")
        return {
            "code": np.frombuffer(self._codes, dtype=np.uint32),
            "step": np.frombuffer(self._steps, dtype=np.uint64),
            "x": np.frombuffer(self._xs, dtype=np.float64),
            "value": np.frombuffer(self._values, dtype=np.float64),
        }

    def to_pandas(self) -> Any:
        """A DataFrame with columns ``run``, ``name`` (categoricals), ``step``, ``x``, ``value``,
        sorted by name then step."""
        pd = _need("pandas", "pandas")
        np = _need("numpy", "pandas")
        cols = self.numpy()
        n = len(self)
        return pd.DataFrame(
            {
                "run": pd.Categorical.from_codes(np.zeros(n, dtype=np.int8), [self.run]),
                "name": pd.Categorical.from_codes(
                    cols["code"].astype(np.int32), self.names
                ),
                "step": cols["step"],
                "x": cols["x"],
                "value": cols["value"],
            },
            copy=False,
        )

    def to_arrow(self) -> Any:
        """A pyarrow Table with the same columns as ``to_pandas()`` (names dictionary-encoded)."""
        pa = _need("pyarrow", "arrow")
        n = len(self)

        def column(kind: Any, data: bytes) -> Any:
            return pa.Array.from_buffers(kind, n, [None, pa.py_buffer(data)])

        codes = column(pa.uint32(), self._codes).cast(pa.int32())
        return pa.table(
            {
                "run": pa.DictionaryArray.from_arrays(
                    pa.repeat(pa.scalar(0, pa.int32()), n), pa.array([self.run])
                ),
                "name": pa.DictionaryArray.from_arrays(codes, pa.array(self.names, pa.string())),
                "step": column(pa.uint64(), self._steps),
                "x": column(pa.float64(), self._xs),
                "value": column(pa.float64(), self._values),
            }
        )


class Lab:
    """A glassbox lab, opened for reading: ``Lab("./glassbox-lab")``,
    ``Lab("s3://bucket/prefix")`` (the log, ``vkey`` and blobs a lab publishes to a bucket) or
    ``Lab("http://127.0.0.1:8080")`` (a running ``glassbox serve``).

    Raises ``LabNotFoundError`` when there is no lab at ``source``. All three give the same
    rows, points and verdicts: a bucket or a server's log and blobs are read as
    ``glassbox verify`` reads them, a server's runs and experiments through its JSON API. A
    bucket is read with the ``AWS_ENDPOINT_URL``, ``AWS_REGION``, ``AWS_ACCESS_KEY_ID`` and
    ``AWS_SECRET_ACCESS_KEY`` variables; it holds no index, so its log is indexed into a
    temporary directory when it is opened. Reads release the GIL. A directory's derived index
    (``index.db``) is brought up to date with its log before a query, as ``glassbox ledger
    log`` does; nothing else in the lab is written.
    """

    def __init__(self, source: Union[str, "os.PathLike[str]"]) -> None:
        text = os.fspath(source)
        self._lab = _glassbox.Lab(text)
        self.source = text

    def __repr__(self) -> str:
        return f"glassbox.Lab({self.source!r})"

    def runs(self, query: Optional[str] = None) -> Rows:
        """The runs matching ``query`` (the dashboard's search language, e.g.
        ``status = succeeded and metrics."train/loss" < 2``), in run id order.
        A query that does not parse raises ``QueryError`` naming its column."""
        rows = json.loads(self._lab.runs_json(query))
        return Rows(_typed(Run, r) for r in rows)

    def experiments(self, query: Optional[str] = None) -> Rows:
        """The experiments with a row (an experiment with one of its runs) matching ``query``,
        in id order."""
        rows = json.loads(self._lab.experiments_json(query))
        return Rows(_typed(Experiment, r) for r in rows)

    def metrics(
        self, run: str, names: Optional[Sequence[str]] = None, x: str = "step"
    ) -> Metrics:
        """Every point of ``run``'s metrics (those in ``names``, else all), read from its metric
        chunks in the record (each checked against its hash), never downsampled. ``x`` is
        ``"step"``, ``"tokens"``, ``"flops"`` or ``"time"`` (seconds), as the dashboard's charts.
        A vector metric's component ``i`` is the metric ``<name>/<i>``."""
        if isinstance(names, str):
            names = [names]
        cols = self._lab.metric_columns(run, list(names) if names is not None else None, x)
        return Metrics(run, x, *cols)

    def summary(self, run: str) -> Dict[str, Any]:
        """The run's row (``run``) and per metric: ``points``, ``first_step``, ``last_step``,
        ``last``, ``min``, ``max`` (finite values; None when there is none)."""
        return json.loads(self._lab.summary_json(run))

    def entries(self, kind: Optional[str] = None, since: Optional[int] = None) -> Rows:
        """Entries of ``kind`` (e.g. ``"result"``, ``"annotation"``, ``"anomaly"``,
        ``"forecast"``, ``"samples"``, ``"evaluation"``; all when None) with index ``since`` or
        later, in log order; ``.to_pandas()`` makes them a table with a column per body field
        (``lab.entries("evaluation").to_pandas()["body.metrics.acc_norm"]``)."""
        return Rows(Entry._of(r) for r in json.loads(self._lab.entries_json(kind, since)))

    def entry(self, index: int) -> Entry:
        """Entry ``index``, read from the log under its signed checkpoint."""
        return Entry._of(json.loads(self._lab.entry_json(index)))

    def blob(self, hash: str) -> bytes:
        """The blob ``blake3:<hex>``; raises ``VerificationError`` when its bytes do not hash
        to its name."""
        return self._lab.blob(hash)

    def spec(self, experiment: str) -> Dict[str, Any]:
        """The experiment's current spec, every default filled in (what its hash covers)."""
        return json.loads(self._lab.spec_json(experiment))

    def proof(self, index: int) -> InclusionProof:
        """The inclusion proof of entry ``index`` in the current checkpoint's tree; check it
        offline with ``glassbox.verify_inclusion``."""
        return InclusionProof(**json.loads(self._lab.proof_json(index)))

    def verify(
        self,
        vkey: Optional[str] = None,
        state_dir: Optional[Union[str, "os.PathLike[str]"]] = None,
        skip_blobs: bool = False,
        witnesses: Optional[Sequence[str]] = None,
        quorum: Optional[int] = None,
    ) -> Dict[str, Any]:
        """Runs the Rust auditor (``glassbox verify``): the checkpoint's signature against
        ``vkey`` (else the key remembered for this lab in ``state_dir``, else the lab's own,
        trusted on first use), every tile and entry, every blob re-hashed (unless
        ``skip_blobs``), and the index against the log. With ``witnesses`` (witness keys,
        ``name+hexid+base64``), the checkpoint must also carry valid cosignatures from
        ``quorum`` of them (all by default), as ``glassbox verify --witness K --quorum N``.
        Raises ``VerificationError`` naming the first bad item; returns the report (size,
        root, entries, blobs, ``cosigned`` when witnesses were given, ...)."""
        return json.loads(
            self._lab.verify_json(
                vkey,
                os.fspath(state_dir) if state_dir is not None else None,
                skip_blobs,
                list(witnesses) if witnesses is not None else [],
                quorum,
            )
        )
