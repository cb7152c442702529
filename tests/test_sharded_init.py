"""Sharded initialisation on 2 real CPU processes (gloo): a model built inside
`accelerator.sharded_init()` (rank 0 real, the other rank on the meta device) or on the meta device
everywhere, then sharded by `prepare`, which fills only each rank's part.

What must hold: the weights after prepare are *bitwise* those of an ordinary build with the same
seed (rank 0's copy scattered into the shards, or a sharded checkpoint read back), and training
from there ends at bitwise the same weights as the ordinary path — same shards, same arithmetic,
so no tolerance is needed. Without any source of weights, modules' reset_parameters() initialise
the shards, each rank drawing its own numbers.
"""

import pytest
import torch
from deepspeed_import import import_deepspeed_or_skip
from sharded_init_trainers import init_then_train, ordinary_weights

from notebook_launcher import Accelerator, init_empty_weights, init_on_device, notebook_launch


@pytest.fixture(scope="module", autouse=True)
def fsdp_imported():
    """The FSDP strategy imported once, before this file's first launch, so forked workers inherit it;
    here rather than at import, which every xdist worker's collection would pay (~0.7 s of CPU)."""
    import notebook_launcher.runtime.strategies.fsdp  # noqa: F401


TIMEOUT = 300
FSDP = dict(
    distributed_type="FSDP", fsdp_config={"fsdp_transformer_layer_cls_to_wrap": "TransformerEncoderLayer"}
)


def assert_bitwise(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    different = [k for k in want if not torch.equal(got[k], want[k])]
    assert different == [], f"not bitwise equal: {different}"


# ------------------------------------------------------------------ one process
def test_init_empty_weights_puts_parameters_on_meta_and_keeps_buffers():
    from notebook_launcher.system.host_memory import process_memory

    before = process_memory().rss
    with init_empty_weights():  # 64 GB of weights if they were real
        huge = torch.nn.Sequential(*(torch.nn.Linear(40_000, 10_000) for _ in range(40)))
        norm = torch.nn.BatchNorm1d(4)
    assert all(p.is_meta for p in huge.parameters()) and huge[0].weight.shape == (10_000, 40_000)
    assert process_memory().rss - before < 2**30  # each weight's memory was never touched
    assert norm.weight.is_meta and not norm.running_mean.is_meta  # buffers stay real by default
    with init_empty_weights(include_buffers=True):
        norm = torch.nn.BatchNorm1d(4)
    assert norm.running_mean.is_meta
    with init_on_device("cpu"):
        real = torch.nn.Linear(2, 2)
    assert not real.weight.is_meta
    plain = torch.nn.Linear(2, 2)  # the patch is gone after the block
    assert not plain.weight.is_meta


def test_include_buffers_follows_accelerates_environment_variable(monkeypatch):
    monkeypatch.setenv("ACCELERATE_INIT_INCLUDE_BUFFERS", "true")
    with init_empty_weights():
        norm = torch.nn.BatchNorm1d(4)
    assert norm.running_mean.is_meta


def test_one_process_builds_real_weights_in_sharded_init():
    result = notebook_launch(_one_process_sharded_init, num_processes=1, timeout=TIMEOUT, **FSDP)
    assert_bitwise(result[0], ordinary_weights())


def _one_process_sharded_init():
    from sharded_init_trainers import build

    accelerator = Accelerator()
    model = accelerator.prepare(build(accelerator, "sharded_init"))
    return accelerator.get_state_dict(model)


# ------------------------------------------------------------------- FSDP
@pytest.fixture(scope="module")
def fsdp_ordinary():
    return notebook_launch(init_then_train, args=("ordinary",), num_processes=2, timeout=TIMEOUT, **FSDP)


def test_fsdp_sharded_init_gives_the_ordinary_weights_and_training(fsdp_ordinary):
    result = notebook_launch(
        init_then_train, args=("sharded_init",), num_processes=2, timeout=TIMEOUT, **FSDP
    )
    assert result[0]["meta"] is False and result[1]["meta"] is True  # rank 1 really built nothing
    # FSDP's full state dict arrives on rank 0 only (gathered from every rank's shards)
    assert_bitwise(result[0]["initial"], ordinary_weights())
    assert_bitwise(result[0]["trained"], fsdp_ordinary[0]["trained"])
    for rank in (0, 1):
        assert_bitwise(result[rank]["pieces"], fsdp_ordinary[rank]["pieces"])
    assert result[0]["losses"] == fsdp_ordinary[0]["losses"]


def test_fsdp_cpu_ram_efficient_loading_uses_rank_0s_weights(fsdp_ordinary):
    """Accelerate's flag: every rank built a model, but only rank 0's values count."""
    fsdp = dict(FSDP, fsdp_config=dict(FSDP["fsdp_config"], fsdp_cpu_ram_efficient_loading=True))
    result = notebook_launch(_rank_seeded_build, num_processes=2, timeout=TIMEOUT, **fsdp)
    assert_bitwise(result[0], ordinary_weights())  # gathered from both ranks' shards


def _rank_seeded_build():
    from sharding_trainers import TinyTransformer

    accelerator = Accelerator()
    torch.manual_seed(0 if accelerator.is_main_process else 123)  # rank 1 builds other weights
    model = accelerator.prepare(TinyTransformer())
    return accelerator.get_state_dict(model)


def test_fsdp_meta_everywhere_loads_a_sharded_checkpoint_exactly(fsdp_ordinary, tmp_path):
    sharded = dict(FSDP, fsdp_config=dict(FSDP["fsdp_config"], fsdp_state_dict_type="SHARDED_STATE_DICT"))
    folder = str(tmp_path / "ckpt")
    notebook_launch(init_then_train, args=("ordinary",), kwargs={"save_to": folder, "epochs": 0},
                    num_processes=2, timeout=TIMEOUT, **sharded)  # fmt: skip
    result = notebook_launch(init_then_train, args=("meta",), kwargs={"load_from": folder},
                             num_processes=2, timeout=TIMEOUT, **sharded)  # fmt: skip
    assert result[0]["meta"] and result[1]["meta"]
    assert_bitwise(result[0]["initial"], ordinary_weights())  # FSDP gathers full weights on rank 0
    assert_bitwise(result[0]["trained"], fsdp_ordinary[0]["trained"])


def test_fsdp_meta_everywhere_without_weights_resets_each_shard_apart():
    result = notebook_launch(init_then_train, args=("meta", "raw"), num_processes=2, timeout=TIMEOUT, **FSDP)
    pieces = [result[rank]["pieces"] for rank in (0, 1)]
    weight = "body.blocks.0.linear1.weight"  # 32 x 16, 16 rows per rank
    assert not torch.equal(pieces[0][weight], pieces[1][weight]), "both ranks drew the same numbers"
    bound = 1 / 16**0.5  # nn.Linear's reset: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = 16
    full = result[0]["initial"][weight]
    assert full.abs().max() <= bound and full.std() > bound / 3
    assert torch.equal(result[0]["initial"]["body.blocks.0.norm1.weight"], torch.ones(16))
    assert torch.equal(result[0]["initial"]["scale"], torch.zeros(16))  # no reset_parameters(): zero
    assert "scale" in result.logs[0] and "reset_parameters" in result.logs[0]  # ...and said so
    assert result[0]["losses"][-1] < result[0]["losses"][0]


# --------------------------------------------------- DDP and one process
def test_ddp_takes_rank_0s_weights_into_meta_built_ranks():
    ordinary = notebook_launch(init_then_train, args=("ordinary",), num_processes=2, timeout=TIMEOUT)
    result = notebook_launch(init_then_train, args=("meta_but_rank0",), num_processes=2, timeout=TIMEOUT)
    assert result[1]["meta"] is True
    for rank in (0, 1):
        assert_bitwise(result[rank]["initial"], ordinary_weights())
        assert_bitwise(result[rank]["trained"], ordinary[rank]["trained"])


def test_one_process_meta_model_is_reset_and_trains():
    result = notebook_launch(init_then_train, args=("meta",), num_processes=1, timeout=TIMEOUT)
    weight = result[0]["initial"]["blocks.0.linear1.weight"]
    assert result[0]["meta"] and 0 < weight.abs().max() <= 1 / 16**0.5  # nn.Linear's own init
    assert result[0]["losses"][-1] < result[0]["losses"][0]


# -------------------------------------------------------------- DeepSpeed
def _zero3(**fields):
    return dict(distributed_type="DEEPSPEED", deepspeed_config={"zero_stage": 3, **fields})


@pytest.fixture(scope="module")
def deepspeed_or_skip():
    import_deepspeed_or_skip()  # forked workers inherit it


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["transformer", "mlp"])
def test_zero3_sharded_init_gives_the_ordinary_weights_and_training(kind, deepspeed_or_skip):
    ordinary = notebook_launch(
        init_then_train, args=("ordinary", kind), num_processes=2, timeout=TIMEOUT, **_zero3()
    )
    result = notebook_launch(
        init_then_train, args=("sharded_init", kind), num_processes=2, timeout=TIMEOUT, **_zero3()
    )
    assert result[1]["meta"] is True
    for rank in (0, 1):
        assert_bitwise(result[rank]["initial"], ordinary_weights(kind))  # (a partition's padding is
        assert_bitwise(result[rank]["trained"], ordinary[rank]["trained"])  # uninitialised: not compared)
    if kind == "mlp":  # zero.Init (zero3_init_flag) is exact where each module initialises its own weights
        flagged = notebook_launch(init_then_train, args=("sharded_init", kind), num_processes=2,
                                  timeout=TIMEOUT, **_zero3(zero3_init_flag=True))  # fmt: skip
        assert_bitwise(flagged[0]["initial"], ordinary_weights(kind))
        assert_bitwise(flagged[0]["trained"], ordinary[0]["trained"])
        assert "zero3_init_flag is set" not in flagged.logs[0]
        whole = notebook_launch(init_then_train, args=("ordinary", kind), kwargs={"epochs": 0}, num_processes=2,
                                timeout=TIMEOUT, **_zero3(zero3_init_flag=True))  # fmt: skip
        assert "zero3_init_flag is set, but this model was built whole" in whole.logs[0]  # said, not ignored
