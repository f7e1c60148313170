"""GPU targets: `cuda:sm_XX` names a preset of that architecture, its records key
round-trips, and `cuda` without a GPU says so in one line."""
import dataclasses

import pytest

from tlmir.errors import BuildError, NoDeviceError
from tlmir.runtime.target import GPU_CLASSES, HardwareParams, gpu_variants, host_hardware, parse_target


def test_every_gpu_preset_parses_and_its_key_round_trips():
    assert set(GPU_CLASSES) == {"sm_70", "sm_80", "sm_86", "sm_90"}
    for arch, hw in GPU_CLASSES.items():
        assert parse_target(f"cuda:{arch}") == hw
        assert (hw.kind, hw.isa, hw.max_threads, hw.max_shared_kb, hw.warp_size) == ("cuda", arch, 1024, 48, 32)
        assert HardwareParams.from_key(hw.key) == hw
    assert GPU_CLASSES["sm_90"].key == "cuda-sm_90-c132-l1_256K-l2_51200K-t1024-s48K-r65536_255-w32-v8"
    assert gpu_variants() == list(GPU_CLASSES.values())


def test_cpu_keys_are_unchanged_by_the_gpu_fields():
    host = host_hardware()
    assert host.key.count("-") == 4 and HardwareParams.from_key(host.key) == host
    assert HardwareParams.from_key("cpu-avx2-c8-l1_32K-l2_512K").max_threads == 0


def test_bad_gpu_targets_and_keys_name_what_is_wrong():
    with pytest.raises(BuildError, match="unknown GPU architecture 'sm_75'; available: sm_70, sm_80"):
        parse_target("cuda:sm_75")
    with pytest.raises(BuildError, match="takes no options"):
        parse_target("cuda:sm_90 -cores=4")
    with pytest.raises(BuildError, match="cuda:sm_90"):
        parse_target("gpu")
    hw = dataclasses.replace(GPU_CLASSES["sm_80"], max_vthread=4)
    assert HardwareParams.from_key(hw.key) == hw
    for bad in ("cuda-sm_90-c132-l1_256K-l2_51200K", "cuda-sm_90-c132-l1_256K-l2_51200K-t1024-s48K-r65536-w32-v8"):
        with pytest.raises(Exception, match="hardware key"):
            HardwareParams.from_key(bad)


def test_the_host_gpu_target_without_a_gpu_is_a_one_line_error():
    try:
        hw = parse_target("cuda")
    except NoDeviceError as e:
        assert "target 'cuda' is this machine's GPU, and there is none here" in str(e)
        assert "cuda:sm_90" in str(e) and "\n" not in str(e)
    else:  # a machine with a GPU: its own architecture and limits
        assert hw.kind == "cuda" and hw.isa.startswith("sm_") and hw.max_threads >= 1024
