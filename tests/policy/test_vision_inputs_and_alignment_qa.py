"""Image inputs of the HF policy as a caller writes them (one bare image per sequence, a stacked [N, H, W, 3] array,
missing images), cross-scoring a vision prompt, and rollout batches whose images must be each row's own episode's
pictures in every context mode (checked by decoding the pictures tile by tile against the prompt's coordinates)."""

from __future__ import annotations

import itertools
import re

import gymnasium as gym
import numpy as np
import pytest
import torch

import ragen_envs  # noqa: F401  (registers the ids)
from ragen_core.policy import HFPolicy, build_tiny_model
from ragen_core.policy.tiny import IMAGE_TOKEN
from ragen_core.rollout import RolloutSettings, rollout
from ragen_envs.sokoban.render import BOX, BOX_ON_TARGET, PLAYER, PLAYER_ON_TARGET, TILE, sprites

SMALL = dict(hidden=32, layers=2, heads=2, kv_heads=1)


@pytest.fixture(scope="module")
def vision(tmp_path_factory):
    return HFPolicy.from_pretrained(build_tiny_model(tmp_path_factory.mktemp("tinyv_in"), vision=True, **SMALL))


@pytest.fixture(scope="module")
def rooms():
    env = gym.make("ragen/Sokoban-Vision-v0", disable_env_checker=True)
    return [env.reset(seed=s)[0]["image"] for s in range(3)]


def _one_image_prompt(policy):
    return policy.encode_chat([{"role": "user", "content": f"{IMAGE_TOKEN} move"}])


# ------------------------------------------------------------------------------------ per-sequence image lists
def test_a_bare_image_in_place_of_a_sequences_list_is_a_clear_error(vision, rooms):
    """images=[img] (the list forgotten) used to fail with numpy's "truth value of an array is ambiguous"."""
    prompt = _one_image_prompt(vision)
    with pytest.raises(ValueError, match=r"images\[0\] must be the list .*wrap a single image"):
        vision.generate([prompt], images=[rooms[0]], max_new_tokens=2)
    ids, mask = vision.pad([prompt + [40, 41]])
    with pytest.raises(ValueError, match=r"images\[0\] must be the list .*wrap a single image"):
        vision.forward_logprobs(ids, mask, images=[rooms[0]])


def test_a_stacked_array_of_images_is_that_list_of_images(vision, rooms):
    """A [N, H, W, 3] array per sequence is N images: the same log-probs and samples as the list of them."""
    k = IMAGE_TOKEN
    prompts = [vision.encode_chat([{"role": "user", "content": f"{k} a {k} b"}]), _one_image_prompt(vision)]
    as_lists = [[rooms[0], rooms[1]], [rooms[2]]]
    stacked = [np.stack(as_lists[0]), torch.from_numpy(np.stack(as_lists[1]))]
    ids, mask = vision.pad([p + [40, 41, 42] for p in prompts])
    with torch.no_grad():
        want = vision.forward_logprobs(ids, mask, images=as_lists).logprobs
        got = vision.forward_logprobs(ids, mask, images=stacked).logprobs
    torch.testing.assert_close(got, want, atol=0, rtol=0)
    a = vision.generate(prompts, images=as_lists, max_new_tokens=4, generator=torch.Generator().manual_seed(3))
    b = vision.generate(prompts, images=stacked, max_new_tokens=4, generator=torch.Generator().manual_seed(3))
    assert [g.response_ids for g in a] == [g.response_ids for g in b]


def test_missing_images_say_how_many_tokens_an_image_takes(vision):
    ids, mask = vision.pad([_one_image_prompt(vision) + [40]])
    with pytest.raises(ValueError, match=r"36 image tokens \(36 per image\) but 0 image\(s\) were given"):
        vision.forward_logprobs(ids, mask, images=[[]])


def test_cross_scoring_a_prompt_with_image_tokens_is_refused(vision):
    """cross_score takes no pictures: an image-token prompt used to be scored with the bare <image> embedding."""
    with_image = _one_image_prompt(vision)
    text_only = vision.encode_chat([{"role": "user", "content": "move"}])
    traces = [[[40, 41], [42]]]
    with pytest.raises(ValueError, match="cross_score: prompt 0 holds the image token"):
        vision.cross_score([with_image], traces)
    image_id = vision.model.config.image_token_id
    with pytest.raises(ValueError, match="trace of group 0 1 holds the image token"):
        vision.cross_score([text_only], [[[40], [image_id, 41]]])
    scores, lengths = vision.cross_score([text_only], traces)  # text alone is still scored
    assert scores.shape == (1, 2, 1) and lengths.tolist() == [[2, 1]]


# ------------------------------------------------------------------------------------ images line up with rows
def _tile_ids(image: np.ndarray) -> np.ndarray:
    """The Sokoban tile id of every 16x16 block, found by exact comparison with each sprite (an independent read of
    the picture: the env never decodes its own images)."""
    s = sprites()
    h, w = image.shape[0] // TILE, image.shape[1] // TILE
    out = np.empty((h, w), int)
    for r in range(h):
        for c in range(w):
            block = image[r * TILE:(r + 1) * TILE, c * TILE:(c + 1) * TILE]
            (out[r, c],) = [k for k in range(len(s)) if np.array_equal(s[k], block)]
    return out


def _check_row(policy, ids: list[int], images: list[np.ndarray]) -> int:
    """Each image of a row shows the player and boxes the text right after its placeholder lists."""
    text = policy.decode(ids, skip_special_tokens=False)
    segments = re.split(f"(?:{re.escape(IMAGE_TOKEN)})+", text)[1:]
    assert len(segments) == len(images)
    for seg, image in zip(segments, images, strict=True):
        cells = _tile_ids(image)
        player = tuple(int(v) for v in re.search(r"Player: \((\d+), (\d+)\)", seg).groups())
        boxes = [tuple(map(int, m)) for m in re.findall(r"\((\d+), (\d+)\)", seg.split("Boxes:")[1].split("\n")[0])]
        assert cells[player] in (PLAYER, PLAYER_ON_TARGET)
        assert int(np.isin(cells, (PLAYER, PLAYER_ON_TARGET)).sum()) == 1
        assert all(cells[b] in (BOX, BOX_ON_TARGET) for b in boxes) and boxes
    return len(images)


@pytest.mark.parametrize("context", ["full", "window:1", "single_turn"])
def test_every_row_carries_its_own_episodes_pictures(vision, context):
    """3 levels x 2 rollouts, 4 turns of moves: each row's images (in the batch and in the generate calls) are the
    pictures of the states its own prompt text describes, turn by turn."""
    calls = []
    generate = vision.generate

    def spy(prompts, **kw):
        calls.append((prompts, kw.get("images")))
        return generate(prompts, **kw)

    moves = itertools.cycle(["Up", "Left", "Right", "Down", "Down"])
    settings = RolloutSettings(max_turns=4, context=context, max_new_tokens=4)
    make = lambda: [gym.make("ragen/Sokoban-Vision-v0", obs_format="coord", max_actions_per_turn=1,  # noqa: E731
                             disable_env_checker=True) for _ in range(6)]
    batch = rollout(vision, make(), [5, 11, 17], 2, settings,
                    responder=lambda envs, idx: [f"<think>.</think><answer>{next(moves)}</answer>" for _ in idx])
    shown = 0
    for r in range(batch.input_ids.shape[0]):
        shown += _check_row(vision, batch.input_ids[r, : int(batch.attention_mask[r].sum())].tolist(),
                            batch.images[r])
    assert shown >= batch.input_ids.shape[0]
    vision.generate = spy
    try:
        rollout(vision, make(), [5, 11, 17], 2, settings, generator=torch.Generator().manual_seed(0))
    finally:
        del vision.generate
    assert calls
    for prompts, images in calls:
        for ids, imgs in zip(prompts, images, strict=True):
            _check_row(vision, ids, imgs)
