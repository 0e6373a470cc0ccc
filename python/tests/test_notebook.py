"""The example notebook (``examples/notebook.ipynb`` at the repository root) run as a script
against the test lab: each code cell in order in one namespace, as a kernel would, so a cell
that no longer works with the package fails here. Not a check of the notebook's prose or outputs (it is stored
without outputs)."""

import json
from pathlib import Path

NOTEBOOK = Path(__file__).resolve().parents[2] / "examples" / "notebook.ipynb"


def test_the_example_notebook_runs_against_a_lab(lab_copy, tmp_path, monkeypatch):
    monkeypatch.setenv("GLASSBOX_LAB", str(lab_copy))
    monkeypatch.setenv("GLASSBOX_STATE_DIR", str(tmp_path / "state"))
    notebook = json.loads(NOTEBOOK.read_text())
    assert notebook["nbformat"] == 4
    namespace = {"__name__": "__notebook__"}
    cells = [c for c in notebook["cells"] if c["cell_type"] == "code"]
    assert cells
    for i, cell in enumerate(cells):
        assert not cell["outputs"], f"code cell {i} is stored with outputs"
        exec(compile("".join(cell["source"]), f"{NOTEBOOK.name} code cell {i}", "exec"), namespace)
    # What the cells computed: the lab's runs, every point of a loss curve, a verified record.
    assert set(namespace["runs"]["id"]) == {"run-1", "run-2"}
    assert namespace["run"] == "run-1"
    assert len(namespace["loss"]) == namespace["summary"]["metrics"]["train/loss"]["points"]
    assert namespace["report"]["entries"] == namespace["report"]["size"]
