"""``provenance.json``'s ``config_sha256`` names the config a run computed with: two runs of one design hash equal
whatever their warm-start cache folders and progress bars (the keys ``ragen reproduce`` already treats as the same
run), and any key that changes a result changes the hash. It used to hash the whole ``config.toml`` text, so two
studies of one design on different cache folders showed different hashes for the same computations."""

from __future__ import annotations

import hashlib
import json

import pytest
import tomllib

from ragen_core.apps.reproduce import runner
from ragen_core.training.config import dump_toml, load_config
from ragen_core.training.provenance import RESULT_NEUTRAL_KEYS, config_sha256, write_provenance

BASE = "configs/collapse_sokoban.toml"


def _text(*overrides: str) -> str:
    """The resolved config.toml a run of BASE with `overrides` writes."""
    return dump_toml(load_config(BASE, list(overrides)))


@pytest.mark.parametrize("neutral", ['warm_start.cache_dir="/tmp/another-cache"', "run.progress=false"])
def test_configs_differing_only_in_a_result_neutral_key_hash_equal(neutral):
    base = _text("run.seed=20")
    other = _text("run.seed=20", neutral)
    assert other != base  # the config.toml texts do differ
    assert config_sha256(other) == config_sha256(base)


@pytest.mark.parametrize("key", ["run.seed=21", "algo.lr=2e-6", "filter.enabled=false", "run.steps=41"])
def test_configs_differing_in_a_key_that_changes_results_hash_differently(key):
    assert config_sha256(_text("run.seed=20", key)) != config_sha256(_text("run.seed=20"))


def test_the_hash_is_of_the_config_without_its_neutral_keys_as_sorted_compact_json():
    """A hand-written reference: the JSON below is written out, not computed by the code under test."""
    text = '[run]\nsteps = 3\nprogress = true\n[warm_start]\ncache_dir = "/x"\nepochs = 2\n[algo]\nlr = 1e-06\n'
    reference = '{"algo":{"lr":1e-06},"run":{"steps":3},"warm_start":{"epochs":2}}'
    assert config_sha256(text) == hashlib.sha256(reference.encode()).hexdigest()
    # The text's layout does not count: another order, spacing and a comment give the same hash.
    shuffled = '# c\n[algo]\nlr=1e-6\n\n[warm_start]\nepochs = 2\ncache_dir = "/y"\n[run]\nsteps = 3\n'
    assert config_sha256(shuffled) == config_sha256(text)


def test_every_neutral_key_is_a_config_key_and_reproduce_uses_the_same_set():
    """A misspelt key would leave nothing out, silently; and a run folder reproduce counts as its design's must hash
    as its design does."""
    resolved = tomllib.loads(_text())
    for name in RESULT_NEUTRAL_KEYS:
        section, key = name.split(".")
        assert key in resolved[section], name
    assert runner.SAME_RUN_KEYS == RESULT_NEUTRAL_KEYS


def test_provenance_records_the_hash_and_the_keys_it_leaves_out(tmp_path):
    records = []
    for i, cache in enumerate(("/a/cache", "/b/cache")):
        (tmp_path / str(i)).mkdir()
        records.append(write_provenance(tmp_path / str(i), _text(f'warm_start.cache_dir="{cache}"'), source=[]))
    assert records[0]["config_sha256"] == records[1]["config_sha256"]
    assert records[0]["config_sha256_excludes"] == ["run.progress", "warm_start.cache_dir"]
    on_disk = json.loads((tmp_path / "0" / "provenance.json").read_text())
    assert on_disk["config_sha256"] == records[0]["config_sha256"]


def test_a_config_that_is_not_toml_is_one_line_naming_it():
    with pytest.raises(ValueError, match=r"^config_sha256: the config is not TOML \(") as e:
        config_sha256("[run\nsteps = ")
    assert "\n" not in str(e.value)
