"""resolution/: one decision of a launch for every entry. The same question gets the same answer
from notebook_launch, %%ranks, cluster nodes and the CLI; the answer is one frozen request."""

from __future__ import annotations

import dataclasses
import socket
from types import SimpleNamespace

import pytest
from fresh_python import last_line

from notebook_launcher.config import LaunchConfig
from notebook_launcher.errors import ConfigError
from notebook_launcher.records.names import DEFAULT_PORT, FILE_RENDEZVOUS_ENV, LOOPBACK
from notebook_launcher.resolution import ENTRIES, LaunchRequest, resolve_launch

CPU_ONLY = SimpleNamespace(cuda_device_count=0, fp8_supported=False, bf16_supported=True, gpus=())
LOCAL_ENTRIES = ("notebook", "ranks", "node", "script")


@pytest.fixture
def busy_port():
    with socket.socket() as sock:
        sock.bind(("", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.mark.parametrize("entry", LOCAL_ENTRIES)
def test_a_busy_port_on_one_machine_gives_way_the_same_for_every_entry(entry, busy_port):
    config = LaunchConfig(main_process_port=busy_port)
    request = resolve_launch(config, entry, num_processes=2, hardware=CPU_ONLY)
    assert request.port != busy_port
    assert any(f"port {busy_port} is in use on this machine; using a free port" in n for n in request.notes)
    assert request.main_address == LOOPBACK


@pytest.mark.parametrize("entry", ("notebook", "script"))
def test_a_busy_port_on_machine_0_of_several_is_an_error_for_every_entry(entry, busy_port):
    config = LaunchConfig(num_machines=2, main_process_ip="10.0.0.1", main_process_port=busy_port)
    with pytest.raises(ConfigError, match=f"main_process_port={busy_port} is already in use"):
        resolve_launch(config, entry, num_processes=1, hardware=CPU_ONLY)


def test_several_machines_take_the_default_port_and_machine_0s_address():
    config = LaunchConfig(num_machines=2, machine_rank=1, main_process_ip="10.0.0.1")
    for entry in ("notebook", "script"):
        request = resolve_launch(config, entry, num_processes=2, hardware=CPU_ONLY)
        assert (request.main_address, request.port, request.world_size) == ("10.0.0.1", DEFAULT_PORT, 4)
        assert request.rendezvous_env == {}  # a file is one machine's meeting place only
    with pytest.raises(ConfigError, match="needs main_process_ip"):
        resolve_launch(LaunchConfig(num_machines=2), "notebook", num_processes=1, hardware=CPU_ONLY)


@pytest.mark.parametrize("entry", ("notebook", "script"))
def test_no_from_a_file_yields_to_a_count_given_and_is_an_error_otherwise(entry):
    given = "num_processes=2" if entry == "notebook" else "--num_processes 2"
    file_config = LaunchConfig(distributed_type="NO", num_processes=1)
    request = resolve_launch(
        file_config.replace(num_processes=2) if entry == "script" else file_config,
        entry,
        num_processes=2 if entry == "notebook" else None,
        processes_given=given,
        hardware=CPU_ONLY,
    )
    assert request.world_size == 2 and request.config.distributed_type in (None, "MULTI_CPU")
    assert any(f"{given} overrides the config's distributed_type NO" in note for note in request.notes)
    with pytest.raises(ConfigError, match="distributed_type='NO' runs a single process"):
        resolve_launch(
            LaunchConfig(distributed_type="NO", num_processes=2), entry, type_given=True, hardware=CPU_ONLY
        )


def test_process_counts_by_entry_without_a_gpu():
    config = LaunchConfig()
    counts = {
        entry: resolve_launch(config, entry, hardware=CPU_ONLY).local_processes
        for entry in ("notebook", "ranks", "script")
    }
    assert counts == {"notebook": 2, "ranks": 2, "script": 1}  # Accelerate's launch runs one on a CPU
    cluster = resolve_launch(
        config.replace(num_machines=3),
        "cluster",
        hardware=CPU_ONLY,
        cluster_default=lambda: (4, "the ray cluster"),
    )
    assert (cluster.local_processes, cluster.world_size, cluster.start_method) == (4, 12, "node")
    with pytest.raises(ConfigError, match="must be divisible by num_machines=2"):
        resolve_launch(
            LaunchConfig(num_processes=3, num_machines=2, main_process_ip="10.0.0.1"),
            "script",
            hardware=CPU_ONLY,
        )


def test_what_each_entry_may_not_ask_for():
    with pytest.raises(ConfigError, match="%%ranks runs on this machine only"):
        resolve_launch(LaunchConfig(num_machines=2, main_process_ip="10.0.0.1"), "ranks", hardware=CPU_ONLY)
    with pytest.raises(ConfigError, match="max_restarts=2 cannot be applied by notebook_launch"):
        resolve_launch(LaunchConfig(max_restarts=2), "ranks", hardware=CPU_ONLY)
    with pytest.raises(ConfigError, match="in_process=True runs on this machine only"):
        resolve_launch(LaunchConfig(num_machines=2, main_process_ip="h"), "in_process", num_processes=1)
    with pytest.raises(ConfigError, match="start_method='spawn' cannot be applied with cluster="):
        resolve_launch(LaunchConfig(), "cluster", start_method="spawn", cluster_default=lambda: (1, "x"))
    assert (
        resolve_launch(LaunchConfig(max_restarts=2), "notebook", hardware=CPU_ONLY).config.max_restarts == 2
    )
    assert resolve_launch(LaunchConfig(max_restarts=2), "script", hardware=CPU_ONLY).config.max_restarts == 2


def test_the_request_is_frozen_and_carries_what_workers_need():
    request = resolve_launch(LaunchConfig(gpu_ids="all"), "notebook", num_processes=2, hardware=CPU_ONLY)
    assert isinstance(request, LaunchRequest) and set(ENTRIES) >= set(LOCAL_ENTRIES)
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.port = 1  # type: ignore[misc]
    assert request.rendezvous_env == {FILE_RENDEZVOUS_ENV: "1"} and request.store_bind == LOOPBACK
    assert request.threads_per_rank is not None and request.threads_per_rank >= 1
    assert request.cpu_world and request.visible_devices is None and request.start_method == "fork"
    script = resolve_launch(LaunchConfig(), "script", hardware=CPU_ONLY)
    assert script.port > 0 and script.config.main_process_port == script.port  # torchrun needs a number


def test_resolving_imports_no_torch():
    code = (
        "import sys\n"
        "from notebook_launcher.resolution import layered_config, resolve_launch\n"
        "for entry in ('notebook', 'ranks', 'script'):\n"
        "    resolve_launch(layered_config(None, {}), entry)\n"
        "print('torch' in sys.modules)\n"
    )
    assert last_line(code) == "False"
