"""notebook_launch over several machines, rehearsed on one host: two programs of one process each
(test_cli_helpers.two_machines_here), and two programs of two processes each."""

import json
import subprocess
import sys

import torch
from test_cli_helpers import free_port, two_machines_here


def two_node_all_reduce():
    import torch.distributed as dist

    from notebook_launcher import Accelerator

    acc = Accelerator()
    t = torch.tensor([float(acc.process_index + 1)])
    dist.all_reduce(t)
    return acc.num_processes, acc.process_index, float(t)


def test_two_nodes_over_loopback():
    results = two_machines_here(two_node_all_reduce, "127.0.0.1", free_port())
    assert results[0] == [[2, 0, 3.0]]
    assert results[1] == [[2, 1, 3.0]]


NODE_SCRIPT = """
import json, sys
import torch
import torch.distributed as dist
from notebook_launcher import Accelerator, notebook_launch

def all_reduce():
    acc = Accelerator()
    t = torch.tensor([float(acc.process_index + 1)])
    dist.all_reduce(t)
    return acc.num_processes, acc.process_index, acc.local_process_index, float(t)

if __name__ == "__main__":
    node_rank, port = int(sys.argv[1]), int(sys.argv[2])
    result = notebook_launch(all_reduce, num_processes=2, num_nodes=2, node_rank=node_rank,
                             master_addr="127.0.0.1", master_port=port, quiet=True, timeout=90)
    print("RESULT " + json.dumps(list(result)))
"""


def test_two_machines_as_two_separate_programs(tmp_path):
    """What two machines do: two independent programs (here on one host), 2 processes each."""
    script = tmp_path / "node.py"
    script.write_text(NODE_SCRIPT)
    port = free_port()
    nodes = [
        subprocess.Popen(
            [sys.executable, str(script), str(rank), str(port)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (1, 0)  # the second machine may well start first
    ]
    outputs = [node.communicate(timeout=120) for node in nodes]
    for node, (_out, err) in zip(nodes, outputs, strict=True):
        assert node.returncode == 0, err[-3000:]
    results = {
        rank: [tuple(r) for r in json.loads(out.split("RESULT ", 1)[1])]
        for rank, (out, _) in zip((1, 0), outputs, strict=True)
    }
    assert results[0] == [(4, 0, 0, 10.0), (4, 1, 1, 10.0)]
    assert results[1] == [(4, 2, 0, 10.0), (4, 3, 1, 10.0)]
