"""notebooks/10_model_parallel_on_a_laptop.ipynb runs top to bottom in a real kernel (nbclient) and
shows what a reader must see: the split q_proj on every rank, and TP = 2 and FSDP2 x TP losses equal
to one process's (the notebook asserts them to 1e-5 itself)."""

from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")
pytest.importorskip("transformers")

from test_notebooks import all_text, assert_stored_clean, execute  # noqa: E402

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "10_model_parallel_on_a_laptop.ipynb"


@pytest.mark.slow
@pytest.mark.timeout(360)
def test_model_parallel_notebook(tmp_path):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert_stored_clean(nb, NOTEBOOK.name)
    text = all_text(execute(nb, tmp_path))
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
