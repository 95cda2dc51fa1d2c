"""The warm-start demonstrations are pinned: the same env, seeds and demonstrator knobs give the same texts.

Each case plays a few short episodes per env through :func:`ragen_core.training.sft.scripted_responder` the way
:func:`ragen_core.training.sft.warm_start` does (one responder with one generator for the whole batch, every env stepped
with the text written for it), for each demonstrator setting (reasoning style, action noise and its kind, partial
input dependence with a paying template, filler words, the random policy), and compares the sha256 of all the
texts with a hash recorded below. A setting the demonstrator refuses for an env (Countdown has no action list for
random answers) is pinned as the name of the error it raises. Sudoku's "first" cases were pinned as its error until
it got a habit (a digit the cell sees); those three hashes were recorded anew then, every other one unchanged.

The hashes of the first seven envs were computed on the code before the per-env demonstrators moved into a table
(``ragen_core.training.demonstrators``) and the envs' oracles got one public ``oracle()`` method; those of
``sokoban_turns``, MetaMathQA, SearchQA, WebShop and Code on the code before the table moved into the envs' own
hooks (``oracle_step``, ``random_step``, ``noise_answer`` of :class:`ragen_envs.base.TextAgentEnv`; commit 8cd4b01).
Neither refactor changed a text, and any later change to a demonstration has to update them on purpose.
Sokoban's random moves were described as walks or pushes even where a wall or a stuck box blocks them ("I move
left to (4, 0)" into a wall); they now say what the move does, which changed three hashes of Sokoban settings
whose moves need not be the oracle's (``sokoban``'s random, ``sokoban_turns``' random and noise1_random). No
shipped config's demonstrations changed (every config's warm-start batch hashed before and after, seeds 0, 20, 21).
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import pytest

from ragen_core.rollout import make_envs
from ragen_core.training.sft import oracle_response, random_response, scripted_responder, template_reasoning

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
    "sokoban_turns": ("ragen/Sokoban-v0", {"max_solution_len": 4, "max_actions_per_turn": 3, "max_actions": 5},
                      (0, 1, 2), 3),
    "math": ("ragen/MetaMathQA-v0", {"max_turns": 2}, (0, 1, 2, 3), 2),
    "searchqa": ("ragen/SearchQA-v0", {"hops": 1, "num_entities": 12, "distractors": 1, "top_k": 2, "max_turns": 3},
                 (0, 1, 2), 3),
    "webshop": ("ragen/WebShop-v0", {"num_products": 40, "goal_attributes": (1, 1), "results_per_page": 3,
                                     "max_results": 6, "max_turns": 6}, (0, 1), 4),
    "code": ("ragen/Code-v0", {"num_tests": 2, "num_public_tests": 1, "limits": {"cpu_seconds": 2, "wall_seconds": 4},
                               "families": ("reverse_words", "is_palindrome")}, (0, 1), 2),
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
    "code": {
        "dep0.5_oracle": "962e148770aff2787e76f10ec21308dcce12e3985cfe0919a67faff54f4ae73e",
        "dep0.5_pool": "6f640fae24815981ba804cb265e814ff85cca9a1cef14f6e52ebbd9c1c965b4d",
        "filler3": "e74a8edc09dc7be22d50d6d1e6f77211240963406d935d5dd230c3939da959fc",
        "full": "ca88433d1a8df8ec990fd9653039f05c75aec01c650d37b11fc89bc00491fe12",
        "noise0.6_first": "e29551cee46a3a1aba2ee3495b3c7394fb93b6857c10badcd30cbdecc4919a16",
        "noise0.6_random": "1be2e63ecf2dac708676cc5e066b10c10f0e532a85b35595cbd4b58e6a034296",
        "noise1_first": "e29551cee46a3a1aba2ee3495b3c7394fb93b6857c10badcd30cbdecc4919a16",
        "noise1_random": "518bae025407f15509920983ca37e9ac626a86adbc06bde41134d6a328088240",
        "plan": "ca88433d1a8df8ec990fd9653039f05c75aec01c650d37b11fc89bc00491fe12",
        "random": "f5de3572eaf917769a54b3fdf5c531ad9dc8e8ff4f4659d82239614272789598",
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
    "math": {
        "dep0.5_oracle": "e29551cee46a3a1aba2ee3495b3c7394fb93b6857c10badcd30cbdecc4919a16",
        "dep0.5_pool": "3bf104b5b39af38f2933bf0617cbbc46fbbec0ff0afda13709919e39f0cfd27e",
        "filler3": "97c640c2fea26e835f74696c9de3a7f83fbcfe65f2e7213a28dfc275006ec5a7",
        "full": "9a4b0f1509c3e54add7a926eb4edca6ab091a6c0d3b8852b457d81bf01dd44ef",
        "noise0.6_first": "e29551cee46a3a1aba2ee3495b3c7394fb93b6857c10badcd30cbdecc4919a16",
        "noise0.6_random": "1b395d241a4f3fbc60369a385f9f257c2b1dd8d1424243a4fc003baef57a6a94",
        "noise1_first": "e29551cee46a3a1aba2ee3495b3c7394fb93b6857c10badcd30cbdecc4919a16",
        "noise1_random": "c92ca0c8730b975dd3f73e38df130afefcc435b9eced5ae508ebb00cab45727d",
        "plan": "9a4b0f1509c3e54add7a926eb4edca6ab091a6c0d3b8852b457d81bf01dd44ef",
        "random": "64ea4e921bc1b5994f9d3b565f4077b9d908b04b8eb54b1746900efee2230983",
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
    "searchqa": {
        "dep0.5_oracle": "1a20249939cad3fc2751945377ed90d3d8fec93557c8ec2bbf2ac1f3e1421a97",
        "dep0.5_pool": "dabd0153bea52f874b11f52972f50b0165f0555f77ef706f492f0b84dd211f7d",
        "filler3": "ac3deef9b0eaf41c8d2d40aa74ef6aeb1e5e845b031bb02507e21666590f63b6",
        "full": "54563340b378b1b8e604d65fbd2c3e063510d58107354e4fa52dc41e1dace4c4",
        "noise0.6_first": "11bfe893761a7ed021847f782411ce5623e9a28b40c5a5382edc90b251f8be3e",
        "noise0.6_random": "798cafbbd2dd9f24b011872093d7f07cd21953c93560af517e47a64e146002f8",
        "noise1_first": "11bfe893761a7ed021847f782411ce5623e9a28b40c5a5382edc90b251f8be3e",
        "noise1_random": "85b2ebbd7886eaf5a5cc41084a301aaf1fefdb244227a1c391793fb5faf36cfb",
        "plan": "54563340b378b1b8e604d65fbd2c3e063510d58107354e4fa52dc41e1dace4c4",
        "random": "2ee6af6d484738b532e24d19313f38564c1cd45bfe9f589699cc3a3f1a665743",
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
        "random": "28f021e82f83487e0d6239ddc5d56497c220b4cb3f189b21d8375dd8584da3eb",
    },
    "sokoban_turns": {
        "dep0.5_oracle": "afde1539ca9740f8160a40c146c7b7385fb3aee9c3a05866d05d7e097c60a031",
        "dep0.5_pool": "35aeba2dde2e00bc2599d2fc2537171ce58ba9c41be66d6df6a5498875753881",
        "filler3": "87ac6631f25f9e3c1d6b91700cead9871c773d32c8a0116909cfe09185187803",
        "full": "73362b364a4dd6797675dd9b467b3db1bb786bfd35d25ea0608aed7591834044",
        "noise0.6_first": "66cec4f6ab1c9743c992464c58142dba9d79b93f102ef8f2f633ba8873b35d88",
        "noise0.6_random": "6288624b07bd8214c5375945a6c7b3ca5d4ac208a90c8b4ec4a8b144f23eb89e",
        "noise1_first": "422d27d3f74567558979cbc3d299090d9e8d01e2b3db3423abd7214627938627",
        "noise1_random": "815e5c9fd5c75634e2b7ea2c901e4b9efc9cdad9abf7d0ed04571179e0f3b321",
        "plan": "12daa4cbec6ee8dc6e31c885cf4193b29655caf8c25c73a08a089893ddae1a6c",
        "random": "18f412246fc84b7ca5efa0f4778827b33274b2e554f5f4b80dac3d70ea5475a5",
    },
    "sudoku": {
        "dep0.5_oracle": "d8af38937ed477eb97e81e48cfb56ec596424dffcc7cf42617f341a002fbe906",
        "dep0.5_pool": "fe5273684f6c99b0b17edb5dd8475e766033edfecebf82690610176ec89b7293",
        "filler3": "c6819a0ce1887bd4d2ee2c5725dc7a614be2af0008e0738c1dba856ee9d5ef28",
        "full": "6e2cd0bcd2bdc7550a3430ed7d0f5dafbe4d9b1af54110bc63713b8d3712b37f",
        "noise0.6_first": "fe18f0d692036668aa881f9cd19427e35aa58f1ed3c3288d3b56ae08e8adbe4d",
        "noise0.6_random": "421338114a4d2249fa0e504003f4f8558885b7f59eba42f2bf2897b2894ce35e",
        "noise1_first": "425dff18e49352aa76ca944059facb079e01067c655b26a89df34bedd2d3816d",
        "noise1_random": "17041b8f21cc6f4367de5f6c5467a4c42c34fd7d1ee32e76a1c150d058ffeb64",
        "plan": "6e2cd0bcd2bdc7550a3430ed7d0f5dafbe4d9b1af54110bc63713b8d3712b37f",
        "random": "0c9f752028d894588a88ae38fe8ab32e290664aea54570bc09a9f18c4715237c",
    },
    "webshop": {
        "dep0.5_oracle": "8facf7a8d433afbfe408e182e11218a30afcdf2a1c14f734a1a514be42295135",
        "dep0.5_pool": "2def0bdf74b1efae43ec7457b2535fc5a13661ca7861780a37f693c51adc6bbb",
        "filler3": "d37c1260cdd8f7ba8a3b6026b55312027802ff464e8feac450d4c8d87d41ec78",
        "full": "bf0ecf954f5f0a0140fc60d891b685762d984dafe6d0d7530ed4bf85a5162d8e",
        "noise0.6_first": "87db3f258bfb64c084dcbb985e040e0b46fe52e7ecfa4613335024fa828a316b",
        "noise0.6_random": "afbe9a05056f005e6bb83fe03cef537b82df9c913a14d66f6d9bad402863e052",
        "noise1_first": "87db3f258bfb64c084dcbb985e040e0b46fe52e7ecfa4613335024fa828a316b",
        "noise1_random": "897f5638f475f01ab10d84a33fba3567f0b85b13d0ed43597dde89d4e58e0543",
        "plan": "bf0ecf954f5f0a0140fc60d891b685762d984dafe6d0d7530ed4bf85a5162d8e",
        "random": "93dd5eb35a372623567f05e0c8f2a42c9640df958aa4def69a68ae25df8518d9",
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
    "code/full/0": "febe332e4392eba9ac2a8896047c538e5f13894a69b8e2bdc4c2e51639f26afe",
    "code/full/7": "58c82a424161985a002398dff90f87848b4b13f7054fd1a04d7b54e80054fe6b",
    "code/plan/0": "5669adad3e10bbfe22166423fa6d5307e3254111b2a629ad49103f7d3c4d7d97",
    "code/plan/7": "72c3be03bd07a110fca450ddfb9399d01b742a84f2a7883bd5e147575bff94b9",
    "countdown/full/0": "52872185c2f1e142f3461c8108a30509f60aee18626774f9851414dd803f7dc3",
    "countdown/full/7": "dee1e6fd38a92a20bc35285f1e06b9878b8e3e6c42ba932f41cb138d46be1b39",
    "countdown/plan/0": "06a70e8362bff084ac85dbe0a334b2e39e1a64cad65df9ca1bc35deab668644b",
    "countdown/plan/7": "1a96ab68f280165e3639575ea596faae2b71e3252340dd890700900e2b79b59d",
    "frozenlake/full/0": "ae4c70a6a3b220fa65726341bae4f9d4b3ccc1f5ecf65260119ec6c57f58c9a1",
    "frozenlake/full/7": "2b3c40e9debde5a01e82dbdc2e1dc61d85c2b25a71467a2aa444a8c0dc61391b",
    "frozenlake/plan/0": "e9d947cc8d40b84be696a3805d472b7eb6e6ecb7d5acba0528eea50dfa5020bc",
    "frozenlake/plan/7": "7743afbf1702ecdee29167c7cb8a1ca34f0b7076c55389c8532e27aa6c6f7f84",
    "math/full/0": "212559b6e5bc0cff2e03677eefe5f06431d9f3c1c4e62f4bed4cc9f843afb48d",
    "math/full/7": "342590f7da9fb4152cd7e34e74c3922023786c08ddafc965d58a6e3918810729",
    "math/plan/0": "29c665bbdd50001780ed4534c186aa6e6df0fea744874c96e6ad6cb71372885d",
    "math/plan/7": "bf4f22a87481a2a7434284e32e0c8e5ced73698ec7cc050b501234ab70fc0b1f",
    "pocketcube/full/0": "7250dbd500dc58ecb164b3afa0c09c814c01f9cd75877dda55f6c608abe8b3fb",
    "pocketcube/full/7": "c00c1fe343dc82c66b4b5d5da5f6e23b592e6394c571a468609edfae6aceedc5",
    "pocketcube/plan/0": "9b5056e3a3f4a0f3545bb08083a3547d9ef8282bb06e1df48c276e9d9a13a9d6",
    "pocketcube/plan/7": "1ea8f92d31922d56331f58abebe228a976e6ed97fc089cfb95ffdd96632baa2f",
    "searchqa/full/0": "29e2d0c5b5b120394fe8178c2b93dc0c676d2ec4ade5ad633a7b5926a1efaf83",
    "searchqa/full/7": "aed72c96200d8a3f537d60440d26e8efd64678911a82484279de8eb5ee79a02b",
    "searchqa/plan/0": "e17e4af12f0db2817cf17ee55fce74002cff07101374fb443f35a0a940717dea",
    "searchqa/plan/7": "9439410d4595080a71a3a97135bd6107c7585914bd0947ffddb0ac1329137622",
    "sokoban/full/0": "435536d8739f109389ce860ab7fa24431f4602e4ba19bb230cc92c38538fe340",
    "sokoban/full/7": "95457651d1dea04246b3b87587c61e7f3780bc59c46542ddb31071d9e14678c7",
    "sokoban/plan/0": "7f8edc3f77770d030810331a7b73bbc3dea9ee0c49fdec740c44473ca3be3902",
    "sokoban/plan/7": "8ffedfa12bfe8549eecf0cb92999855cbc4c2fcbe77f8e813575f8adbbaea50d",
    "sokoban_turns/full/0": "479ddaf834c3cde8d304cb5057db5a13019f2dad8145587aaf99a4f44afb59e7",
    "sokoban_turns/full/7": "a1b158295875fc10e73e121a7e8eaa51b6a2a56bd7ec2c4d97b77c87dac9b9c5",
    "sokoban_turns/plan/0": "f1269f07fc4a34b8cec44f627cdf0b78a196b1a8029575a3b5ee625c870cda61",
    "sokoban_turns/plan/7": "344f14737d0469591c10ffda2c76c08453e14c6f981f21a69355d64a9eb7c852",
    "sudoku/full/0": "ea974914ce9bad6a63bb9ee530868aadfcbe73ee461ce5c7d40b1a9ae9ad3ad8",
    "sudoku/full/7": "fcd211e0dff18b1e61568aabe8c980db77fe218d2866e38ff4c6e528e6c90890",
    "sudoku/plan/0": "d9088e705a0bd8177ec58fdd22837406e404cfd4c1e643e82f45792ad3be2a0c",
    "sudoku/plan/7": "f901a8b61b0ba7590e854072ca0e729df752f760b54531668d1369c8e313e03b",
    "webshop/full/0": "3f6fd5956958b88c3a7c18b97bb72c7944ecebbbb2379bed784fce85233ea1a0",
    "webshop/full/7": "e998fac49cfea452432d51806b99d156ce242b308860d4ea71fddc7e8a14a560",
    "webshop/plan/0": "2f5d9665cc3c71e1355188d2b38223973b542932c07c9465da2d66e0c772bec4",
    "webshop/plan/7": "db20daea65cff0f182d6b7a6ad20b4ae49e97eae8741e4c331e780d0a5628098",
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
    sudoku_habit = _play("sudoku", SETTINGS["noise1_first"])  # the habit: a digit the cell sees, refused
    assert sudoku_habit != _play("sudoku", SETTINGS["plan"]) and "!ValueError" not in sudoku_habit
    env = make_envs("ragen/Bandit-v0", 1)[0]
    env.reset(seed=0)
    assert oracle_response(env) in _play("bandit", SETTINGS["full"])  # the responder writes oracle_response's text


# ---------------------------------------------------------------------------------------------- the oracle API
#: The older oracle names, gone: every env has one name per hook (`oracle`, `oracle_step`).
_OLD_NAMES = ("oracle_actions", "oracle_action", "oracle_arm", "oracle_answer")


@pytest.mark.parametrize("name", ["2048", "bandit", "countdown", "frozenlake", "pocketcube", "sokoban", "sudoku"])
def test_oracle_is_the_one_method(name):
    """Every env of the games answers `oracle() -> list[str] | None` (strings in the env's action text), along an
    episode played by the oracle, and the demonstrator's actions are the oracle's first ones (the tool envs'
    demonstrators read the screen as well: tests/envs/test_training_hooks.py)."""
    env_id, kwargs, seeds, turns = ENVS[name]
    env = make_envs(env_id, 1, kwargs)[0]
    u = env.unwrapped
    for seed in seeds[:2]:
        env.reset(seed=seed)
        for _ in range(turns):
            answer = u.oracle()
            assert answer is None or (isinstance(answer, list) and all(isinstance(a, str) for a in answer))
            assert not any(hasattr(u, old) for old in _OLD_NAMES)
            assert u.actions_left == env.unwrapped._actions_left
            if not answer:
                break
            assert u.oracle_step()[1] == answer[: len(u.oracle_step()[1])]
            *_, term, trunc, info = env.step(oracle_response(env))
            assert info["actions_left"] == u.actions_left
            if term or trunc:
                break
    with pytest.raises(AttributeError):
        u.actions_left = 3  # read-only


def test_every_env_defines_oracle_and_its_demonstrator():
    """Read from the sources (importing every env is slow): each env class of ragen_envs defines `oracle` and
    `oracle_step` (its demonstrator), and none keeps an older oracle name."""
    import ast
    import pathlib

    import ragen_envs

    root = pathlib.Path(ragen_envs.__file__).parent
    seen = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.name.endswith("Env") and node.name != "TextAgentEnv":
                methods = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
                methods |= {t.id for n in node.body if isinstance(n, ast.Assign) for t in n.targets
                            if isinstance(t, ast.Name)}
                seen[node.name] = methods
    assert set(seen) >= {"SokobanEnv", "FrozenLakeEnv", "BanditEnv", "CountdownEnv", "MathEnv", "SearchQAEnv",
                         "WebShopEnv", "CodeEnv", "SudokuEnv", "Game2048Env", "PocketCubeEnv"}
    assert [k for k, m in seen.items() if not {"oracle", "oracle_step"} <= m] == []
    assert [k for k, m in seen.items() if m & set(_OLD_NAMES)] == []


def test_the_demonstrator_is_the_envs_hook():
    """A subclass inherits its base's demonstrator; an env without one (the base class's `oracle_step`, or an
    object without the hooks) gets a ValueError that names it."""
    from ragen_envs.base import TextAgentEnv
    from ragen_envs.sokoban.env import SokobanEnv

    class MySokoban(SokobanEnv):
        pass

    env = MySokoban(max_solution_len=2)
    env.reset(seed=3)
    base = SokobanEnv(max_solution_len=2)
    base.reset(seed=3)
    assert oracle_response(env) == oracle_response(base) and "I am at" in oracle_response(env)

    class NoDemo(TextAgentEnv):
        ACTIONS = ("A", "B")

        def oracle(self):
            return ["A"]

    with pytest.raises(ValueError, match="NoDemo has no demonstrator"):
        oracle_response(NoDemo())
    assert random_response(NoDemo(), np.random.default_rng(0)) in (
        "<think> I try A. </think> <answer> A </answer>", "<think> I try B. </think> <answer> B </answer>")

    class NotAnEnv:
        ACTIONS = ("A", "B")

    with pytest.raises(ValueError, match="NotAnEnv has no demonstrator"):
        oracle_response(NotAnEnv())


if __name__ == "__main__":  # prints the tables above, to record them after an intended change
    import pprint

    pprint.pprint({n: {s: _digest(_play(n, SETTINGS[s])) for s in SETTINGS} for n in sorted(ENVS)}, width=120)
    pprint.pprint({t.split(":", 1)[0]: _digest([t]) for t in _templates()}, width=120)
