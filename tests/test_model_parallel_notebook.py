"""The model-parallel notebooks run top to bottom in a real kernel (nbclient) and show what a reader
must see. 10_model_parallel_on_a_laptop.ipynb: the split q_proj on every rank, and TP = 2 and
FSDP2 x TP losses equal to one process's (the notebook asserts them to 1e-5 itself).
11_pipeline_on_a_laptop.ipynb: which blocks each stage holds, and PP = 2, interleaved and PP x FSDP2
losses equal to one process's (the notebook asserts them to 1e-6 itself)."""

from __future__ import annotations

from pathlib import Path

import pytest
from installed import skip_module_unless_installed

skip_module_unless_installed("nbformat", "nbclient")

from test_notebooks import stored_notebook_text  # noqa: E402

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOK = NOTEBOOKS / "10_model_parallel_on_a_laptop.ipynb"
PIPELINE_NOTEBOOK = NOTEBOOKS / "11_pipeline_on_a_laptop.ipynb"


@pytest.mark.slow
@pytest.mark.timeout(360)
def test_model_parallel_notebook(tmp_path):
    pytest.importorskip("transformers")
    text = stored_notebook_text(NOTEBOOK, tmp_path)
    for rank in range(2):
        assert (
            f"[rank{rank}] mesh ('tp',): tp rank {rank}, shard rank 0, q_proj holds (16, 32) of (32, 32)"
            in text
        )
    for rank in range(4):
        assert f"[rank{rank}] mesh ('dp_shard', 'tp'): tp rank {rank % 2}, shard rank {rank // 2}" in text
    assert "q_proj holds (8, 32) of (32, 32)" in text
    starts = ("TP=2 losses", "FSDP2xTP losses", "one process")
    losses = [line.split("[", 1)[1] for line in text.splitlines() if line.startswith(starts)]
    assert len(losses) == 4 and len(set(losses)) == 1, text[-2000:]


@pytest.mark.slow
@pytest.mark.timeout(360)
def test_pipeline_notebook(tmp_path):
    text = stored_notebook_text(PIPELINE_NOTEBOOK, tmp_path)
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
