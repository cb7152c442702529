"""A cluster launch over two real "machines" without a cluster engine: two network namespaces
joined by a veth pair (tests/netns.py), each running one node's launcher exactly as a Ray node
agent runs it (clusters/ray_agent.py -> node_main.py), driven by the notebook-side ClusterRun.
Node 0 hosts the rendezvous at its own address; node 1 picks the interface that reaches it."""

from __future__ import annotations

import cloudpickle
import cluster_trainers
import pytest
from cluster_trainers import all_reduce_and_train, fail_on_rank_one
from netns import two_hosts

from notebook_launcher import LaunchConfig, WorkerError
from notebook_launcher.clusters.driver import ClusterRun
from notebook_launcher.clusters.node import NodeJob
from notebook_launcher.clusters.ray_agent import NodeAgent

pytestmark = pytest.mark.slow


class NamespaceBackend:
    """Backend protocol of clusters/driver.py, with one NodeAgent per network namespace."""

    name = "netns"

    def __init__(self, hosts) -> None:
        self.hosts = hosts
        self.agents = [NodeAgent(host.command()) for host in hosts]
        self.done: set[int] = set()

    def start(self, job: NodeJob, say) -> None:
        first = NodeJob(
            job.payload, job.config, job.nproc, 0, job.num_nodes, self.hosts[0].address, 0, job.timeout
        )
        addr, port = self.agents[0].start(first)
        second = NodeJob(job.payload, job.config, job.nproc, 1, job.num_nodes, addr, port, job.timeout)
        self.agents[1].start(second)

    def poll(self):
        events, notes, finished = [], [], {}
        for node, agent in enumerate(self.agents):
            if node in self.done:
                continue
            node_events, node_notes, outcome, crash = agent.drain()
            events += node_events
            notes += node_notes
            assert crash is None, crash
            if outcome is not None:
                finished[node] = outcome
                self.done.add(node)
        return events, notes, finished

    def stop(self) -> None:
        for agent in self.agents:
            agent.stop()

    def close(self) -> None:
        for agent in self.agents:
            agent.kill()


def _run(hosts, fn, notes):
    config = LaunchConfig(num_processes=2, num_machines=2)
    cloudpickle.register_pickle_by_value(cluster_trainers)
    try:
        payload = cloudpickle.dumps((fn, (), {}))
    finally:
        cloudpickle.unregister_pickle_by_value(cluster_trainers)
    job = NodeJob(payload, config.to_dict(), 1, 0, 2, "", 0, 180)
    return ClusterRun(NamespaceBackend(hosts), job, config, observers=[], say=notes.append).run()


def test_two_nodes_on_two_hosts_form_one_world():
    notes: list[str] = []
    with two_hosts() as hosts:
        result = _run(hosts, all_reduce_and_train, notes)
    assert [value["rank"] for value in result] == [0, 1]
    assert all(value["world"] == 2 and value["sum"] == 3.0 for value in result)
    assert result[0]["weights"].equal(result[1]["weights"])  # DDP kept the two hosts' replicas in step
    # each node said which interface its workers use: the veth that holds or reaches node 0's address
    assert any(f"{hosts[1].interface}" in note and hosts[0].address in note for note in notes), notes


def test_a_failure_on_the_second_host_names_its_rank():
    with two_hosts() as hosts, pytest.raises(WorkerError) as caught:
        _run(hosts, fail_on_rank_one, [])
    assert caught.value.rank == 1 and "boom on rank one" in caught.value.traceback
    # the frames travel too: the notebook shows the user's frame, folded like a local failure's (issue 20)
    assert "in fail_on_rank_one(" in caught.value.shown_traceback(colour=False)
