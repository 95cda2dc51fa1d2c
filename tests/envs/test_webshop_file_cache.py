"""WebShop reads its products and instructions files once per process and file version (not once per env), and
plays the same episodes as before.

The episode digests below were recorded by running `_digests()` (this file's code) on the env as it was before
the files were cached (each env read its instructions file itself); `test_cached_envs_play_as_envs_on_fresh_reads`
checks the same against an env given goals and catalogue read directly, outside any cache.
"""

from __future__ import annotations

import hashlib
import json
import shutil

import numpy as np
import pytest

import ragen_envs.webshop.catalog as catalog_module
import ragen_envs.webshop.env as env_module
from ragen_envs.data import fixture_path
from ragen_envs.data.cache import BuildCache
from ragen_envs.webshop import Catalog, WebShopEnv, load_goals, load_products

PRODUCTS = str(fixture_path("webshop_products.jsonl"))
INSTRUCTIONS = str(fixture_path("webshop_instructions.jsonl"))

#: `_digests()` with the code before the change (see the module docstring).
DIGESTS_BEFORE = {
    "file/oracle": "f2c297687c76278d",
    "file/random": "c8ef0f0f82d1649c",
    "generated/oracle": "0169186460b1aace",
    "generated/random": "f79833953c6ef953",
}


def _episode_digest(env: WebShopEnv, seed: int, policy: str) -> str:
    """SHA-256 of the reset observation and goal, then every step's observation, reward, ends, score and
    purchase of one episode played by the oracle or by `random_action` (drawn from `seed`)."""
    h = hashlib.sha256()
    obs, info = env.reset(seed=seed)
    h.update(json.dumps([obs, info.get("goal"), info.get("index")], sort_keys=True).encode())
    rng = np.random.default_rng(seed)
    for _ in range(env.turn_limit + 1):
        action = env.oracle()[0] if policy == "oracle" else env.random_action(rng)
        obs, reward, term, trunc, info = env.step(f"<think>x</think><answer>{action}</answer>")
        h.update(json.dumps([obs, float(reward), term, trunc, info.get("score"), info.get("purchased")],
                            sort_keys=True).encode())
        if term or trunc:
            break
    return h.hexdigest()


def _digest(make, policy: str) -> str:
    return hashlib.sha256("".join(_episode_digest(make(), s, policy) for s in range(5)).encode()).hexdigest()[:16]


def _digests() -> dict[str, str]:
    out = {}
    for name, make in (("file", lambda: WebShopEnv(products=PRODUCTS, instructions=INSTRUCTIONS)),
                       ("generated", lambda: WebShopEnv(num_products=200))):
        for policy in ("oracle", "random"):
            out[f"{name}/{policy}"] = _digest(make, policy)
    return out


@pytest.fixture
def counted_reads(monkeypatch):
    """Fresh caches, and the number of times each file is read by the WebShop loaders (by file name)."""
    monkeypatch.setattr(env_module, "_GOALS", BuildCache(), raising=False)
    monkeypatch.setattr(env_module, "_CATALOGS", BuildCache())
    reads: dict[str, int] = {}
    real = catalog_module.load_records

    def counting(path, *args, **kwargs):
        name = str(path).rsplit("/", 1)[-1]
        reads[name] = reads.get(name, 0) + 1
        return real(path, *args, **kwargs)

    monkeypatch.setattr(catalog_module, "load_records", counting)
    return reads


def test_many_envs_read_the_instructions_and_products_files_once(counted_reads):
    envs = [WebShopEnv(products=PRODUCTS, instructions=INSTRUCTIONS) for _ in range(8)]
    assert counted_reads == {"webshop_products.jsonl": 1, "webshop_instructions.jsonl": 1}
    assert all(e.goals is envs[0].goals and e.catalog is envs[0].catalog for e in envs)
    for i, env in enumerate(envs):  # the shared list is only read: every env still plays its own record
        _, info = env.reset(seed=i, options={"index": i % len(env.goals)})
        assert info["goal"] == env.goals[i % len(env.goals)].as_dict()
    assert [g.as_dict() for g in envs[0].goals] == [g.as_dict() for g in load_goals(INSTRUCTIONS,
                                                                                      Catalog(load_products(PRODUCTS)))]


def test_an_edited_instructions_file_is_read_again(tmp_path, counted_reads):
    path = tmp_path / "goals.jsonl"
    shutil.copy(INSTRUCTIONS, path)
    first = WebShopEnv(products=PRODUCTS, instructions=path)
    lines = path.read_text().splitlines()
    edited = json.loads(lines[0])
    edited["instruction"] = edited["instruction"].replace("cotton", "COTTON")  # same size, new content
    path.write_text("\n".join([json.dumps(edited), *lines[1:]]) + "\n")
    second = WebShopEnv(products=PRODUCTS, instructions=path)
    assert "COTTON" in second.goals[0].instruction and "COTTON" not in first.goals[0].instruction
    path.write_text(lines[1] + "\n")  # fewer records
    assert len(WebShopEnv(products=PRODUCTS, instructions=path).goals) == 1
    assert counted_reads["goals.jsonl"] == 3


def test_goals_are_read_against_their_own_catalogue(tmp_path, counted_reads):
    """A goal takes its missing type, category and query from its target product: the same instructions
    file read against another products file gives other goals."""
    other = tmp_path / "products.jsonl"
    records = [json.loads(line) for line in open(PRODUCTS)]
    for r in records:
        r["type"] = "gadget " + r.get("type", "")
    other.write_text("".join(json.dumps(r) + "\n" for r in records))
    plain = WebShopEnv(products=PRODUCTS, instructions=INSTRUCTIONS)
    renamed = WebShopEnv(products=other, instructions=INSTRUCTIONS)
    targets = [i for i, g in enumerate(plain.goals) if g.asin is not None and g.type]
    assert targets
    for i in targets:
        assert renamed.goals[i].type == "gadget " + plain.goals[i].type


def test_a_missing_instructions_file_is_one_clear_error(tmp_path):
    with pytest.raises(ValueError, match="nope.jsonl"):
        WebShopEnv(products=PRODUCTS, instructions=tmp_path / "nope.jsonl")


def test_episodes_are_the_same_as_before_the_files_were_cached():
    assert _digests() == DIGESTS_BEFORE


def test_cached_envs_play_as_envs_on_fresh_reads():
    """An env whose catalogue and goals were read right here, outside every cache, plays the same episodes."""

    def fresh() -> WebShopEnv:
        env = WebShopEnv(products=PRODUCTS, instructions=INSTRUCTIONS)
        env.catalog = Catalog(load_products(PRODUCTS))
        env.goals = load_goals(INSTRUCTIONS, env.catalog)
        return env

    for policy in ("oracle", "random"):
        assert _digest(fresh, policy) == _digest(lambda: WebShopEnv(products=PRODUCTS, instructions=INSTRUCTIONS),
                                                 policy)
