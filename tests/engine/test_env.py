"""One parser for every environment knob: the site's settings and EngineConfig read values alike."""

from __future__ import annotations

import pytest

from inference.engine.config import EngineConfig
from inference.engine.env import env_bool, env_int, env_list, env_str


@pytest.mark.parametrize(
    "raw, expected", [("0", False), ("false", False), (" OFF ", False), ("no", False), ("1", True), ("yes", True)]
)
def test_a_boolean_reads_the_same_in_the_engine_and_the_site(raw, expected):
    assert env_bool("MINIVLLM_PREFIX_CACHING", not expected, {"MINIVLLM_PREFIX_CACHING": raw}) is expected
    assert EngineConfig.from_env({"MINIVLLM_PREFIX_CACHING": raw}).enable_prefix_caching is expected


def test_unset_or_blank_means_the_default():
    for environ in ({}, {"X": ""}, {"X": "   "}):
        assert env_str("X", "d", environ) == "d" and env_int("X", 7, environ) == 7 and env_list("X", ["a"], environ) == ["a"]
        assert env_bool("X", True, environ) is True
    assert EngineConfig.from_env({"MINIVLLM_MAX_NUM_SEQS": " "}).max_num_seqs is None
    assert env_list("X", [], {"X": " a, b ,,c "}) == ["a", "b", "c"]


def test_the_isa_cap_arrives_through_the_config_and_is_checked_there():
    assert EngineConfig.from_env({"MINIVLLM_CPU_ISA": "avx2"}).cpu_isa == "avx2"
    assert EngineConfig.from_env({}).cpu_isa == "auto"
    with pytest.raises(ValueError, match="cpu_isa"):
        EngineConfig(cpu_isa="sse2")
