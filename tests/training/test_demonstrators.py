"""The warm-start demonstrations are pinned: the same env, seeds and demonstrator knobs give the same texts.

Each case plays a few short episodes per env through :func:`ragen_core.training.sft.scripted_responder` the way
:func:`ragen_core.training.sft.warm_start` does (one responder with one generator for the whole batch, every env stepped
with the text written for it), for each demonstrator setting (reasoning style, action noise and its kind, partial
input dependence with a paying template, filler words, the random policy), and compares the sha256 of all the
texts with a hash recorded below. A setting the demonstrator refuses for an env (Sudoku has no first action,
Countdown no action list for random answers) is pinned as the name of the error it raises.

The hashes were computed on the code before the per-env demonstrators moved into a table
(``ragen_core.training.demonstrators``) and the envs' oracles got one public ``oracle()`` method; that refactor
changed no
text, and any later change to a demonstration has to update them on purpose.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import pytest

from ragen_core.rollout import make_envs
from ragen_core.training.sft import oracle_response, scripted_responder, template_reasoning

#: (env id, env kwargs, seeds, turns per episode) of each pinned env.
ENVS: dict[str, tuple[str, dict[str, Any], tuple[int, ...], int]] = {
    "sokoban": ("ragen/Sokoban-v0", {"obs_format": "coord", "max_solution_len": 2, "max_actions_per_turn": 1},
                (0, 1, 2, 3), 3),
    "frozenlake": ("ragen/FrozenLake-v0", {"obs_format": "coord", "is_slippery": False, "max_actions_per_turn": 1},
                   (0, 1, 2, 3), 3),
    "bandit": ("ragen/Bandit-v0", {}, (0, 1, 2, 3, 4, 5), 1),
    "countdown": ("ragen/Countdown-v0", {"num_count": 3, "num_range": [1, 4], "target_range": [1, 16]},
                  (0, 1, 2, 3), 2),
    "sudoku": ("ragen/Sudoku-v0", {"size": 4, "max_actions_per_turn": 1}, (0, 1, 2), 3),
    "2048": ("ragen/2048-v0", {"oracle_depth": 1}, (0, 1), 3),
    "pocketcube": ("ragen/PocketCube-v0", {"scramble_depth": [1, 2], "max_actions_per_turn": 1, "max_actions": 2},
                   (0, 1, 2), 2),
}

#: Demonstrator settings: scripted_responder's keyword arguments ("template": how many reference levels).
SETTINGS: dict[str, dict[str, Any]] = {
    "full": {},
    "plan": {"reasoning": "plan"},
    "noise0.6_first": {"noise": 0.6, "noise_action": "first"},
    "noise0.6_random": {"noise": 0.6, "noise_action": "random"},
    "noise1_first": {"reasoning": "plan", "noise": 1.0, "noise_action": "first"},
    "noise1_random": {"noise": 1.0, "noise_action": "random"},
    "dep0.5_oracle": {"reasoning": "plan", "noise": 0.6, "noise_action": "first", "dependence": 0.5,
                      "template": 1, "template_answer": "oracle"},
    "dep0.5_pool": {"dependence": 0.5, "template": 2, "noise": 0.6, "noise_action": "random"},
    "filler3": {"filler_words": 3, "noise": 0.6, "noise_action": "random"},
    "random": {"kind": "random"},
}


def _play(name: str, setting: dict[str, Any]) -> list[str]:
    """All texts the demonstrator writes for the env's seeds (turn by turn), or ``["!ErrorName"]``."""
    env_id, kwargs, seeds, turns = ENVS[name]
    knobs = dict(setting)
    kind = knobs.pop("kind", "oracle")
    if "template" in knobs:
        refs = [template_reasoning(env_id, kwargs, knobs.get("reasoning", "full"), seed=900 + r)
                for r in range(knobs["template"])]
        knobs["template"] = refs[0] if len(refs) == 1 else refs
    envs = make_envs(env_id, len(seeds), kwargs)
    for env, seed in zip(envs, seeds):
        env.reset(seed=seed)
    responder = scripted_responder(kind, np.random.default_rng(1234), **knobs)
    live = list(range(len(envs)))
    texts: list[str] = []
    try:
        for _ in range(turns):
            if not live:
                break
            out = list(responder([envs[i] for i in live], live))
            texts += out
            still = []
            for i, text in zip(live, out):
                _, _, term, trunc, _ = envs[i].step(text)
                if not (term or trunc):
                    still.append(i)
            live = still
    except ValueError as err:
        return texts + [f"!{type(err).__name__}"]
    return texts


def _digest(texts: list[str]) -> str:
    return hashlib.sha256("\n\x1e\n".join(texts).encode()).hexdigest()


# Computed on the code before the refactor (see the module docstring) with
# `python tests/training/test_demonstrators.py`.
EXPECTED: dict[str, dict[str, str]] = {
    "2048": {
        "dep0.5_oracle": "1c42b82a86f7cb0e34689f76260cd0b9381b16177fa5a40062646b7cd43aa65d",
        "dep0.5_pool": "f035cb1b04ab5b4a73d6307aa14514373da88d04e78c3da1dcfdbde5a13167e3",
        "filler3": "3aa944d3442474b64760dddef6a33057fc6570e9f25186bfc6edde8633fa633c",
        "full": "2174a0895371cabee0db624580ccef17fc1b230f7b52442bc2470c2c1ac7eb59",
        "noise0.6_first": "46598c86585ec81f0eea70d59a6a2a0c8674d4e60e08c8ec66dd8768e158bfe2",
        "noise0.6_random": "112907d022d5004d04c0f9994b95441c32b7acf84a6c1b2371b849b3c8710e10",
        "noise1_first": "8424ed1f5aca86bd6244649e11d42061bfb490743c2fafccc1e625c3be05a83b",
        "noise1_random": "6153f28c25fae03f7572afc2285ddee531c65b23e7516944e301d7ac744a0ed3",
        "plan": "2174a0895371cabee0db624580ccef17fc1b230f7b52442bc2470c2c1ac7eb59",
        "random": "cf7ccfaf22d6b93b51f371cb1a2208ecb5b6bfc77795b57f5fe83faaee1d4932",
    },
    "bandit": {
        "dep0.5_oracle": "5e81d032c445a4ffc10e5e9a6513e7e3793072d992cf4d7b1f4370dbab81b864",
        "dep0.5_pool": "75214007801dc0fa0ba7952cb8ebb6affd20c77a1d22539069af188b3c0f9d47",
        "filler3": "25fd096b58481d8f3f5868965697423df98f556b8f9f574d41f892d8867c5808",
        "full": "228707d608c60a280e58d9329f76afcbdbd1ea4ce37aa0362b9f2c55eed5570b",
        "noise0.6_first": "20c202e21f169eaec346f25f891730f627f279ba571b42895aad927fc4396172",
        "noise0.6_random": "adb7e8cd2c5955bbd9df93e1974df046c817d3388b35fc4d6a9c6ff908ded38b",
        "noise1_first": "8957060cf9bd8778cf1f31762490a62eb2bbc7e6d231ffe148d362a2724f234b",
        "noise1_random": "d3b89ec79eedac232e5ff029bfc1739bc6414d6d45ded57ffce34a9b025a307b",
        "plan": "228707d608c60a280e58d9329f76afcbdbd1ea4ce37aa0362b9f2c55eed5570b",
        "random": "ad4756bf710183777891fee62e246a6f6b96a8c350eb340e1863439156b2fdde",
    },
    "countdown": {
        "dep0.5_oracle": "e9de01cd5814750d4edf62064459d6ba2e5a49840aa5b6c3cae61ee87f5b28b5",
        "dep0.5_pool": "13e6c3ac094823854d562bd7f82c47146e2b336cd9b3eb80352fb38806ab87f7",
        "filler3": "c9a044a6a45820cca821b9d3a7d5789b775f810e4810cef2dcbdfce162c258c4",
        "full": "290b5386e7f9e9e03f4f42e91f8afb51c900a06c5645e3d529be716d1930203f",
        "noise0.6_first": "38a2100e644d0658a108cc41ee84d650446ef7e1c5bad00aa098d752a07e6dd7",
        "noise0.6_random": "3a296fb5e68b1b9b36b63323f79cd9d78d83c46e866f34eeea091f02d0923df1",
        "noise1_first": "77678116eba54dda6c9293d36c0a9b144ef7a97fbd934edba6aa4175198979d6",
        "noise1_random": "720efe7f801e300cafcdedd89731074bffd7b1447d62432d4a09c30b16e8f1ba",
        "plan": "290b5386e7f9e9e03f4f42e91f8afb51c900a06c5645e3d529be716d1930203f",
        "random": "e29551cee46a3a1aba2ee3495b3c7394fb93b6857c10badcd30cbdecc4919a16",
    },
    "frozenlake": {
        "dep0.5_oracle": "6fd93c9b0f6ae2ef3108988823e6c627b93a04656e141850f815cf92f246b545",
        "dep0.5_pool": "00317ae0a872a78fc71cb26177f0b8c656c8fd6a443f22a59a31dc4d4feb6da9",
        "filler3": "33e186339f269fbde8e76e8a72a10411f3325e994fd5cedf3c032d95d2a8814c",
        "full": "45598d6c48e3e2bbc8bf88a81bc4dbbaab87eee3143d8dfce3e0d9459076446a",
        "noise0.6_first": "a0f25400924cda4cc527ff457148b4be4a76902e9444dd005c052734aeeeb692",
        "noise0.6_random": "9428285dfb34fd084564e644d685891268f6fb386188a7653334456badb1e119",
        "noise1_first": "a0f25400924cda4cc527ff457148b4be4a76902e9444dd005c052734aeeeb692",
        "noise1_random": "75aba4530a94d91bbbf45018e53854a22fb01f5f2f3f2fec540b44f4f53c57a0",
        "plan": "45598d6c48e3e2bbc8bf88a81bc4dbbaab87eee3143d8dfce3e0d9459076446a",
        "random": "5802d692372cf7ed3328d636c9f1ad89e704fbe861a203ce2cf41def0df03684",
    },
    "pocketcube": {
        "dep0.5_oracle": "15c4209742765501432caadc91d8318c039819f0a70e12ad98086471e18c5e9e",
        "dep0.5_pool": "e101b99247b032568e7072479c16c3e8346a8e5c899947f1c99b3092d9c0f6fa",
        "filler3": "ddb9366113a86924dcee8c507728e1c2b2a371bdd19f11fee56fee493045856a",
        "full": "c8ee37d7e8add19de6b8c389d3ab072f8ad8e27cc5b6ad47e658d5079aff98bb",
        "noise0.6_first": "8b87625269ac1f6f6e01506a1207171618c0d1ab9d209a72cb8a736ddfbfc0ed",
        "noise0.6_random": "a68fa2f63588d489e4e4137e4ac696a63027a58835256a8bb965939add19a70a",
        "noise1_first": "982c096473f721a7451b2815bc0efe7213cb8e59cf7a002356d92d8036f5086c",
        "noise1_random": "ce8c8db388309bbc52ccbfe07c11494644d0799ed1ca5d27d19cb323ff560a6a",
        "plan": "c8ee37d7e8add19de6b8c389d3ab072f8ad8e27cc5b6ad47e658d5079aff98bb",
        "random": "7638ad54b71dcd2bc22287386c6b235c15d9625d48ec591d5f6eb2a6617143a3",
    },
    "sokoban": {
        "dep0.5_oracle": "fd829a53f15208ae80eaa1686db4c29d38f8d9e2858c73f4d61df557e7746a9a",
        "dep0.5_pool": "6f2c74ed90fc26b178bb6c6a668faaf5241af63f4b6e16f51c13e63c00440def",
        "filler3": "1152c6ddbab06ee7ce924b4195cc1aa924a0a38a7b9931c3721e16e38c9a2aa2",
        "full": "494ee2cd01b8e01fb3fab28ce85952a85eff5153eefc76b6424a328e297f4b56",
        "noise0.6_first": "aba2fe42ca046dc941f4cc17eda90419da14e3d6bffc3152780383d9c2e3efce",
        "noise0.6_random": "8ee178ca416f3605b881c878d8f07176121e35de6c88da1e3d6d350b5e025772",
        "noise1_first": "e408677da8ea7a6e8ccdc04eb826b653e89558e17644f461e493aa9d0c59f794",
        "noise1_random": "3a811ad8dcbea20bf8f64ae0eafbf3f53d703de69415fceb0a8d0aebc7828b0a",
        "plan": "a04da78afaad7e2d3c586bc30e9f5cd12ba0050c9521e8e6d6c1e04433ac92b7",
        "random": "14c6d37f950eeb5b0b0776e2378e9cd864656364c81d2d70ed123cecc742280a",
    },
    "sudoku": {
        "dep0.5_oracle": "e29551cee46a3a1aba2ee3495b3c7394fb93b6857c10badcd30cbdecc4919a16",
        "dep0.5_pool": "fe5273684f6c99b0b17edb5dd8475e766033edfecebf82690610176ec89b7293",
        "filler3": "c6819a0ce1887bd4d2ee2c5725dc7a614be2af0008e0738c1dba856ee9d5ef28",
        "full": "6e2cd0bcd2bdc7550a3430ed7d0f5dafbe4d9b1af54110bc63713b8d3712b37f",
        "noise0.6_first": "e29551cee46a3a1aba2ee3495b3c7394fb93b6857c10badcd30cbdecc4919a16",
        "noise0.6_random": "421338114a4d2249fa0e504003f4f8558885b7f59eba42f2bf2897b2894ce35e",
        "noise1_first": "e29551cee46a3a1aba2ee3495b3c7394fb93b6857c10badcd30cbdecc4919a16",
        "noise1_random": "17041b8f21cc6f4367de5f6c5467a4c42c34fd7d1ee32e76a1c150d058ffeb64",
        "plan": "6e2cd0bcd2bdc7550a3430ed7d0f5dafbe4d9b1af54110bc63713b8d3712b37f",
        "random": "0c9f752028d894588a88ae38fe8ab32e290664aea54570bc09a9f18c4715237c",
    },
}

EXPECTED_TEMPLATES: dict[str, str] = {
    "2048/full/0": "a6e201445b3f53cdd75302e635c7c53e7771db052f284a191c478ef0b9c2df0c",
    "2048/full/7": "b00a20e6275669108b963443b988e3b343b5d1c7922aca3e9aa8c3d3b7ae6a3e",
    "2048/plan/0": "35526a254be09b40f04a727294a15aca2dad875652acad08f946800467ac4aa3",
    "2048/plan/7": "dda23c84e8a5efaa9f9b877efc34b6a22a53f0a47eda8d993bc5b0c767f25080",
    "bandit/full/0": "77dfedf2bebae1ca560882b3315f6b2913b61baff30b71c600c6b9ce286f3acc",
    "bandit/full/7": "b5f09ca51778b5228a11ed11152f45fc8f7a75e422f656b3300a88acef57837a",
    "bandit/plan/0": "94262f0ab7bb6ef848a3df254adae2b0d05d155ab3dd5b038b2d5d07305a4e26",
    "bandit/plan/7": "d418e1a7862aa44f98b65ac7befbe2fb20c209b3e8749bdf524fada0a77ba817",
    "countdown/full/0": "52872185c2f1e142f3461c8108a30509f60aee18626774f9851414dd803f7dc3",
    "countdown/full/7": "dee1e6fd38a92a20bc35285f1e06b9878b8e3e6c42ba932f41cb138d46be1b39",
    "countdown/plan/0": "06a70e8362bff084ac85dbe0a334b2e39e1a64cad65df9ca1bc35deab668644b",
    "countdown/plan/7": "1a96ab68f280165e3639575ea596faae2b71e3252340dd890700900e2b79b59d",
    "frozenlake/full/0": "ae4c70a6a3b220fa65726341bae4f9d4b3ccc1f5ecf65260119ec6c57f58c9a1",
    "frozenlake/full/7": "2b3c40e9debde5a01e82dbdc2e1dc61d85c2b25a71467a2aa444a8c0dc61391b",
    "frozenlake/plan/0": "e9d947cc8d40b84be696a3805d472b7eb6e6ecb7d5acba0528eea50dfa5020bc",
    "frozenlake/plan/7": "7743afbf1702ecdee29167c7cb8a1ca34f0b7076c55389c8532e27aa6c6f7f84",
    "pocketcube/full/0": "7250dbd500dc58ecb164b3afa0c09c814c01f9cd75877dda55f6c608abe8b3fb",
    "pocketcube/full/7": "c00c1fe343dc82c66b4b5d5da5f6e23b592e6394c571a468609edfae6aceedc5",
    "pocketcube/plan/0": "9b5056e3a3f4a0f3545bb08083a3547d9ef8282bb06e1df48c276e9d9a13a9d6",
    "pocketcube/plan/7": "1ea8f92d31922d56331f58abebe228a976e6ed97fc089cfb95ffdd96632baa2f",
    "sokoban/full/0": "435536d8739f109389ce860ab7fa24431f4602e4ba19bb230cc92c38538fe340",
    "sokoban/full/7": "95457651d1dea04246b3b87587c61e7f3780bc59c46542ddb31071d9e14678c7",
    "sokoban/plan/0": "7f8edc3f77770d030810331a7b73bbc3dea9ee0c49fdec740c44473ca3be3902",
    "sokoban/plan/7": "8ffedfa12bfe8549eecf0cb92999855cbc4c2fcbe77f8e813575f8adbbaea50d",
    "sudoku/full/0": "ea974914ce9bad6a63bb9ee530868aadfcbe73ee461ce5c7d40b1a9ae9ad3ad8",
    "sudoku/full/7": "fcd211e0dff18b1e61568aabe8c980db77fe218d2866e38ff4c6e528e6c90890",
    "sudoku/plan/0": "d9088e705a0bd8177ec58fdd22837406e404cfd4c1e643e82f45792ad3be2a0c",
    "sudoku/plan/7": "f901a8b61b0ba7590e854072ca0e729df752f760b54531668d1369c8e313e03b",
}


@pytest.mark.parametrize("name", sorted(ENVS))
def test_demonstrations_are_pinned(name):
    got = {s: _digest(_play(name, SETTINGS[s])) for s in SETTINGS}
    assert got == EXPECTED[name]


def _templates() -> list[str]:
    out = []
    for name in sorted(ENVS):
        env_id, kwargs, _, _ = ENVS[name]
        for style in ("full", "plan"):
            for seed in (0, 7):
                out.append(f"{name}/{style}/{seed}: {template_reasoning(env_id, kwargs, style, seed=seed)}")
    return out


def test_template_reasoning_is_pinned():
    assert {t.split(":", 1)[0]: _digest([t]) for t in _templates()} == EXPECTED_TEMPLATES


def test_the_pins_see_the_knobs():
    """The settings are not vacuous: each changes the texts of an env it applies to (so a pinned hash can fail
    when a knob's code path changes), and the noisy answers differ from the oracle's."""
    base = _play("sokoban", SETTINGS["plan"])
    for s in ("noise1_first", "dep0.5_oracle"):
        assert _play("sokoban", SETTINGS[s]) != base, s
    full = _play("frozenlake", SETTINGS["full"])
    for s in ("noise0.6_random", "filler3", "random", "dep0.5_pool"):
        assert _play("frozenlake", SETTINGS[s]) != full, s
    assert _play("sudoku", SETTINGS["noise1_first"]) == ["!ValueError"]  # no first placement: a clear error
    env = make_envs("ragen/Bandit-v0", 1)[0]
    env.reset(seed=0)
    assert oracle_response(env) in _play("bandit", SETTINGS["full"])  # the responder writes oracle_response's text


# ---------------------------------------------------------------------------------------------- the oracle API
#: The older oracle names and how they read `oracle()` (first answer, whole list).
_ALIASES = {"oracle_actions": "list", "oracle_action": "first", "oracle_arm": "first", "oracle_answer": "first"}


@pytest.mark.parametrize("name", sorted(ENVS))
def test_oracle_is_the_one_method_and_the_old_names_agree(name):
    """Every pinned env answers `oracle() -> list[str] | None` (strings in the env's action text), along an
    episode played by the oracle, and its older oracle names return the same answer in their old forms."""
    env_id, kwargs, seeds, turns = ENVS[name]
    env = make_envs(env_id, 1, kwargs)[0]
    u = env.unwrapped
    checked = 0
    for seed in seeds[:2]:
        env.reset(seed=seed)
        for _ in range(turns):
            answer = u.oracle()
            assert answer is None or (isinstance(answer, list) and all(isinstance(a, str) for a in answer))
            for old, form in _ALIASES.items():
                if hasattr(u, old):
                    got = getattr(u, old)()
                    assert got == (answer if form == "list" else (answer[0] if answer else None)), old
                    checked += 1
            assert u.actions_left == env.unwrapped._actions_left
            if not answer:
                break
            *_, term, trunc, info = env.step(oracle_response(env))
            assert info["actions_left"] == u.actions_left
            if term or trunc:
                break
    assert checked or name in ("pocketcube",)  # PocketCube has no older name (optimal_solution)
    with pytest.raises(AttributeError):
        u.actions_left = 3  # read-only


def test_every_env_with_an_oracle_defines_oracle():
    """Read from the sources (importing every env is slow): each env class of ragen_envs that has an older
    oracle method or the oracle_step hook also defines `oracle`."""
    import ast
    import pathlib

    import ragen_envs

    root = pathlib.Path(ragen_envs.__file__).parent
    older = {"oracle_actions", "oracle_action", "oracle_arm", "oracle_answer", "oracle_step"}
    seen = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                methods = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
                methods |= {t.id for n in node.body if isinstance(n, ast.Assign) for t in n.targets
                            if isinstance(t, ast.Name)}
                if methods & older:
                    seen[node.name] = "oracle" in methods
    assert set(seen) >= {"SokobanEnv", "FrozenLakeEnv", "BanditEnv", "CountdownEnv", "MathEnv", "SearchQAEnv",
                         "WebShopEnv", "CodeEnv", "SudokuEnv", "Game2048Env", "PocketCubeEnv"}
    assert all(seen.values()), [k for k, v in seen.items() if not v]


def test_demonstrators_are_looked_up_by_env_class():
    """The table is keyed by the env class (subclasses share it); an env with neither oracle_step() nor an
    entry gets a ValueError that names it."""
    from ragen_core.training.demonstrators import DEMONSTRATORS, demonstrator_for, find_demonstrator
    from ragen_envs.game2048.env import Game2048Env
    from ragen_envs.sokoban.env import SokobanEnv

    class MySokoban(SokobanEnv):
        pass

    env = MySokoban(max_solution_len=2)
    env.reset(seed=3)
    assert find_demonstrator(env) is DEMONSTRATORS[SokobanEnv]
    base = SokobanEnv(max_solution_len=2)
    base.reset(seed=3)
    assert oracle_response(env) == oracle_response(base) and "I am at" in oracle_response(env)
    assert find_demonstrator(Game2048Env()) is None  # writes its own reasoning (oracle_step)

    class NoDemo:
        ACTIONS = ("A", "B")

        def oracle(self):
            return ["A"]

    with pytest.raises(ValueError, match="NoDemo has no demonstrator"):
        demonstrator_for(NoDemo())
    with pytest.raises(ValueError, match="NoDemo has no demonstrator"):
        oracle_response(NoDemo())


if __name__ == "__main__":  # prints the tables above, to record them after an intended change
    import pprint

    pprint.pprint({n: {s: _digest(_play(n, SETTINGS[s])) for s in SETTINGS} for n in sorted(ENVS)}, width=120)
    pprint.pprint({t.split(":", 1)[0]: _digest([t]) for t in _templates()}, width=120)
