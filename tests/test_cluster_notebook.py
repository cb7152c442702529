"""notebooks/08_clusters.ipynb in a real kernel (nbclient), with a real local Ray cluster (given to
the kernel as RAY_ADDRESS) and the real local SLURM: the same train function on this machine, on
Ray and on SLURM, and the same losses. Skipped, with the reason printed, when either cluster
cannot start here."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from installed import skip_module_unless_installed
from kernel_session import code_cell, execute_notebook, read_notebook
from ray_support import shared_ray_cluster  # noqa: F401  (fixture `ray_cluster`: one Ray cluster for the Ray tests)
from slurm_support import local_slurm

skip_module_unless_installed("nbformat", "nbclient")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "08_clusters.ipynb"


def test_the_clusters_notebook_gives_the_same_losses_everywhere(tmp_path, monkeypatch, ray_cluster):
    pytest.importorskip("submitit", reason="submitit is not installed (pip install submitit)")
    local_slurm()
    monkeypatch.setenv("RAY_ADDRESS", ray_cluster.address)
    nb = read_notebook(NOTEBOOK)
    assert all(not cell.get("outputs") for cell in nb.cells if cell.cell_type == "code"), "stored outputs"
    nb.cells.append(
        code_cell(
            'import json\nprint("FACTS " + json.dumps({"here": list(here), "ray": list(on_ray), "slurm": list(on_slurm)}))'
        )
    )
    took = execute_notebook(nb, tmp_path, 600)
    text = "".join(out.get("text", "") for cell in nb.cells for out in cell.get("outputs", []))
    facts = json.loads(re.findall(r"^FACTS (.*)$", text, flags=re.M)[-1])
    assert len(facts["here"]) == 2 and len(facts["here"][0]) == 6  # 2 ranks, 6 steps each
    # The same processes and reduction order on every cluster: equal losses, no tolerance needed.
    assert facts["ray"] == facts["here"] and facts["slurm"] == facts["here"]
    assert text.count("same losses as this machine: True") == 2
    assert "[rank0] 2 ranks, last loss" in text  # live output from the Ray agent and the SLURM log
    assert re.search(r"SLURM job \d+ submitted", text)
    print(f"08_clusters.ipynb ran in {took:.0f} s")
