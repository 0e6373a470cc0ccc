"""Type stubs of ``glassbox._glassbox``, the Rust extension module (PyO3) behind ``glassbox``.

Use the ``glassbox`` package instead: it wraps these into typed objects and tables. Rows cross
as JSON text; metric points as native-endian byte buffers. Not the public API.
"""

from os import PathLike
from typing import List, Optional, Tuple, Union

__version__: str

class GlassboxError(Exception):
    """Base class of every error glassbox raises (its message is the Rust error's)."""

class LabNotFoundError(GlassboxError):
    """There is no lab at the source given (the message says what is missing)."""

class NotFoundError(GlassboxError):
    """No run, experiment, entry or blob of that name in the lab."""

class QueryError(GlassboxError):
    """A run-search query that does not parse."""

    column: int
    """The 1-based column (in characters) of the error."""

class VerificationError(GlassboxError):
    """The record is not what it should be; the message names the first bad item."""

class Lab:
    """A lab directory or a server's URL, opened for reading (``LabNotFoundError`` when
    there is no lab there)."""

    def __init__(self, source: Union[str, PathLike[str]]) -> None: ...
    @property
    def source(self) -> str:
        """Where the lab is read from (a directory or a URL)."""
    def runs_json(self, query: Optional[str] = None) -> str:
        """The runs matching ``query``: a JSON array of the API's run rows, each with ``spec``."""
    def experiments_json(self, query: Optional[str] = None) -> str:
        """The experiments with a row matching ``query``: a JSON array."""
    def metric_columns(
        self, run: str, names: Optional[List[str]] = None, x: str = "step"
    ) -> Tuple[List[str], bytes, bytes, bytes, bytes]:
        """``(names, codes, steps, x, values)``: native-endian ``u32``, ``u64``, ``f64``, ``f64``
        buffers with one element per point, sorted by name then step."""
    def summary_json(self, run: str) -> str:
        """The run's row and per-metric figures, as JSON."""
    def entries_json(self, kind: Optional[str] = None, since: Optional[int] = None) -> str:
        """Entries of ``kind`` from index ``since`` on, as a JSON array (``raw``: the bytes)."""
    def entry_json(self, index: int) -> str:
        """Entry ``index`` read from the log, as JSON."""
    def blob(self, hash: str) -> bytes:
        """A blob's bytes, checked against its hash."""
    def spec_json(self, experiment: str) -> str:
        """An experiment's current spec, as JSON."""
    def proof_json(self, index: int) -> str:
        """The inclusion proof of entry ``index``, as JSON."""
    def verify_json(
        self,
        vkey: Optional[str] = None,
        state_dir: Optional[str] = None,
        skip_blobs: bool = False,
        witnesses: List[str] = ...,
        quorum: Optional[int] = None,
    ) -> str:
        """Runs the auditor (with the witnesses' quorum when witnesses are given); the report as
        JSON, or ``VerificationError``."""

def verify_inclusion(
    entry: bytes,
    index: int,
    tree_size: int,
    proof: List[str],
    root: str,
    checkpoint: Optional[str] = None,
    vkey: Optional[str] = None,
) -> None:
    """Checks an inclusion proof offline; raises ``VerificationError`` saying what failed."""
