"""notebooks/11_pipeline_on_a_laptop.ipynb runs top to bottom in a real kernel (nbclient) and shows
what a reader must see: which blocks each stage holds, and PP = 2, interleaved and PP x FSDP2 losses
equal to one process's (the notebook asserts them to 1e-6 itself)."""

from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")

from test_notebooks import all_text, assert_stored_clean, execute  # noqa: E402

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "11_pipeline_on_a_laptop.ipynb"


@pytest.mark.slow
@pytest.mark.timeout(360)
def test_pipeline_notebook(tmp_path):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert_stored_clean(nb, NOTEBOOK.name)
    text = all_text(execute(nb, tmp_path))
    assert "[rank0] mesh ('pp',): stage(s) [0] hold ['embed', 'layers.0', 'layers.1']" in text
    assert "[rank1] mesh ('pp',): stage(s) [1] hold ['head', 'layers.2', 'layers.3']" in text
    assert "[rank0] mesh ('pp',): stage(s) [0, 2] hold ['embed', 'layers.0', 'layers.2']" in text
    assert "[rank3] mesh ('pp', 'dp_shard'): stage(s) [1] hold ['head', 'layers.2', 'layers.3']" in text
    two = [
        line.split("[", 1)[1]
        for line in text.splitlines()
        if line.startswith(("PP=2", "interleaved", "one process  "))
    ]
    assert len(two) == 4 and len(set(two)) == 1, text[-2000:]
    four = [
        line.split("[", 1)[1]
        for line in text.splitlines()
        if line.startswith(("PPxFSDP2", "one process (16)"))
    ]
    assert len(four) == 2 and len(set(four)) == 1, text[-2000:]
