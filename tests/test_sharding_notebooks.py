"""notebooks/03_fsdp_transformer and 04_deepspeed, executed top to bottom by a real kernel (nbclient);
the figures the notebooks print are read back from the kernel and checked."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

pytestmark = pytest.mark.slow

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
FACTS = "FACTS "


def run(name: str, facts_expression: str, workdir: Path) -> tuple[dict, str]:
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    for cell in nb.cells:  # stored clean: no outputs, no execution counts
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, f"{name} is stored with outputs"
    nb.cells.append(
        nbformat.v4.new_code_cell(f"import json as _j\nprint({FACTS!r} + _j.dumps({facts_expression}))")
    )
    client = nbclient.NotebookClient(
        nb, timeout=240, kernel_name="python3", resources={"metadata": {"path": str(workdir)}}
    )
    client.execute()
    text = "".join(
        o.get("text", "")
        for cell in nb.cells
        for o in cell.get("outputs", [])
        if o.get("output_type") == "stream"
    )
    found = re.findall(rf"^{FACTS}(.*)$", text, flags=re.M)
    assert found, f"no facts line in the outputs:\n{text[-3000:]}"
    return json.loads(found[-1]), text


@pytest.mark.timeout(300)
def test_fsdp_notebook(tmp_path):
    facts, text = run(
        "03_fsdp_transformer.ipynb",
        '{"local": [fsdp[r]["local_params"] for r in range(2)], "total": fsdp[0]["total_params"],'
        ' "kind": fsdp[0]["kind"], "ddp_local": ddp[0]["local_params"], "loss_gap": loss_gap,'
        ' "largest_gap": gaps[largest],'
        ' "shards": sorted(p.name for p in (checkpoint / "pytorch_model_fsdp_0").glob("*.distcp")),'
        ' "resumed_losses": resumed[0]["losses"]}',
        tmp_path,
    )
    assert facts["kind"] == "FSDP"  # the seed YAML's strategy reached the workers
    assert sum(facts["local"]) == facts["total"] == facts["ddp_local"]
    assert all(0.45 < n / facts["total"] < 0.55 for n in facts["local"])
    assert facts["loss_gap"] < 1e-5 and facts["largest_gap"] < 1e-5
    assert facts["shards"] == ["__0_0.distcp", "__1_0.distcp"]
    assert len(facts["resumed_losses"]) == 16  # the second epoch: 256 samples in batches of 16, one process
    assert "holds 100,577 of 201,089 parameters (50%)" in text


@pytest.mark.timeout(300)
def test_deepspeed_notebook(tmp_path):
    facts, text = run(
        "04_deepspeed.ipynb",
        '{"ok": DEEPSPEED_OK, "why": WHY_NOT, "zero": zero_results, "json_gap": json_gap,'
        ' "resume_gap": resume_gap}',
        tmp_path,
    )
    if not facts["ok"]:
        assert "DeepSpeed cannot run here" in text and "skipped:" in text
        pytest.skip(
            f"DeepSpeed cannot run on this machine: {facts['why']} (the notebook said so and skipped)"
        )
    assert sorted(facts["zero"]) == ["1", "2", "3"]
    assert all(gap < 1e-5 for gap in facts["zero"].values()), facts["zero"]
    assert facts["json_gap"] < 1e-5 and facts["resume_gap"] < 1e-6
    assert "saved tensors: {'0.weight': (128, 32)" in text
