"""The vision path end to end, at its edges: env pictures against their declared spaces, images of odd types given
to the tiny vision policy, image tokens that are not images (typed into an env's text, spelled out by the model),
pixel batches of the wrong size, and batch-order invariance of the log-probs with several images per chat."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from gymnasium.utils.env_checker import check_env
from PIL import Image

import ragen_envs  # noqa: F401  (registers the ids)
from ragen_core.episode import ChatEpisode, escape_image_token
from ragen_core.policy import HFPolicy, build_tiny_model
from ragen_core.policy.tiny import IMAGE_TOKEN
from ragen_core.rollout import RolloutSettings, rollout
from ragen_envs.sokoban.render import render_tiles

SMALL = dict(hidden=32, layers=2, heads=2, kv_heads=1)
VISION_IDS = ("ragen/Sokoban-Vision-v0", "ragen/FrozenLake-Vision-v0", "ragen/PocketCube-Vision-v0")


@pytest.fixture(scope="module")
def vision(tmp_path_factory):
    return HFPolicy.from_pretrained(build_tiny_model(tmp_path_factory.mktemp("tinyv"), vision=True, **SMALL))


@pytest.fixture(scope="module")
def rooms():
    env = gym.make("ragen/Sokoban-Vision-v0", disable_env_checker=True)
    return [env.reset(seed=s)[0]["image"] for s in range(4)]


def _score(policy, image, prompt=None):
    prompt = prompt or policy.encode_chat([{"role": "user", "content": f"{IMAGE_TOKEN} move"}])
    ids, mask = policy.pad([prompt + [40, 41, 42]])
    with torch.no_grad():
        return policy.forward_logprobs(ids, mask, images=[[image]]).logprobs


# ------------------------------------------------------------------------------------------ env pictures
@pytest.mark.parametrize("env_id", VISION_IDS)
def test_vision_observations_stay_in_their_space(env_id):
    """check_env, then every observation of 60 steps (through episode ends, steps after the end and resets)."""
    env = gym.make(env_id, disable_env_checker=True).unwrapped
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env, skip_render_check=True)
    space = env.observation_space
    assert isinstance(space, spaces.Dict) and space["image"].dtype == np.uint8
    obs, _ = env.reset(seed=1)
    answers = ["<answer>Up</answer>", "<answer>Right</answer>", "<answer>R</answer>", "nonsense", "<answer>U</answer>"]
    for k in range(60):
        obs, _, terminated, truncated, _ = env.step(answers[k % len(answers)])
        assert space.contains(obs), (env_id, k)
        if terminated or truncated:
            assert space.contains(env.step("<answer>Down</answer>")[0])  # a step after the end
            obs, _ = env.reset(seed=k)
            assert space.contains(obs)


def test_vision_observations_after_reset_options_keep_the_declared_shape():
    sokoban = gym.make("ragen/Sokoban-Vision-v0", dim_room=(7, 8), disable_env_checker=True).unwrapped
    obs, _ = sokoban.reset(seed=0, options={"level": "#####\n#@$.#\n#####"})  # smaller than the frame
    assert sokoban.observation_space.contains(obs) and obs["image"].shape == (7 * 16, 8 * 16, 3)
    assert sokoban.observation_space.contains(sokoban.step("<answer>Right</answer>")[0])
    lake = gym.make("ragen/FrozenLake-Vision-v0", disable_env_checker=True).unwrapped
    obs, _ = lake.reset(seed=0, options={"desc": ["SFFF", "FHFH", "FFFH", "HFFG"]})
    assert lake.observation_space.contains(obs)
    cube = gym.make("ragen/PocketCube-Vision-v0", disable_env_checker=True).unwrapped
    obs, _ = cube.reset(seed=0, options={"scramble": "R U F'"})
    assert cube.observation_space.contains(obs)


@pytest.mark.parametrize("kwargs", [dict(dim_room=(5, 3)), dict(dim_room=(127, 127), obs_format="image")])
def test_sokoban_pictures_at_the_smallest_and_largest_rooms(kwargs, vision):
    env = gym.make("ragen/Sokoban-Vision-v0", disable_env_checker=True, **kwargs).unwrapped
    obs, _ = env.reset(seed=0)
    h, w = kwargs["dim_room"]
    assert obs["image"].shape == (16 * h, 16 * w, 3) and env.observation_space.contains(obs)
    assert torch.isfinite(_score(vision, obs["image"])).all()  # any room size is resized to the model's input


@pytest.mark.parametrize("ids", [[[1, -1]], [[1, 7]], [[1.0, 2.0]]])
def test_sokoban_render_refuses_tile_ids_outside_the_sprites(ids):
    """-1 used to draw the last sprite (player on target) and 1.0 failed inside NumPy's indexing."""
    with pytest.raises(ValueError, match="tile_ids must hold integer tile ids 0-6"):
        render_tiles(np.array(ids))
    assert render_tiles(np.array([[0, 6]], np.int8)).shape == (16, 32, 3)


@pytest.mark.parametrize("sizes", [dict(image_size=1, patch_size=1), dict(image_size=96, patch_size=96),
                                   dict(image_size=64, patch_size=2, max_positions=1024)])
def test_image_knobs_at_their_bounds(tmp_path, rooms, sizes):
    policy = HFPolicy.from_pretrained(build_tiny_model(tmp_path, vision=True, **SMALL, **sizes))
    k = policy.model.config.image_seq_len
    ids = policy.encode_chat([{"role": "user", "content": f"{IMAGE_TOKEN}{IMAGE_TOKEN} move"}])
    assert ids.count(policy.model.config.image_token_id) == 2 * k
    assert torch.isfinite(_score(policy, rooms[0][:5], prompt=None)).all()  # a 5x96 strip is resized as well


def test_an_image_longer_than_the_position_limit_is_refused_before_allocating(tmp_path):
    """patch_size=1 at image_size=4096 asked for a 16.7 M x hidden position table (gigabytes) before failing."""
    with pytest.raises(ValueError, match="16777216 tokens does not fit max_positions=4096"):
        build_tiny_model(tmp_path / "x", vision=True, image_size=4096, patch_size=1, **SMALL)
    assert not (tmp_path / "x").exists()


# ------------------------------------------------------------------------------------ images given directly
@pytest.mark.parametrize("bad, match", [
    (lambda im: im.astype(np.float32) / 255, "dtype float32.*255"),  # was cast to uint8: a black picture
    (lambda im: im.astype(np.float64), "dtype float64"),
    (lambda im: im.astype(np.int64) + 200, "values .* to 4"),  # was wrapped modulo 256
    (lambda im: im.astype(np.int16) - 300, "values -"),
    (lambda im: im > 100, "dtype bool"),
    (lambda im: np.full(im.shape, np.nan), "dtype float64"),
    (lambda im: im[:0], "empty"),  # was a RuntimeError inside torch's interpolate
    (lambda im: np.asarray(Image.fromarray(im).convert("RGBA")), r"\(96, 96, 4\).*convert\('RGB'\)"),
    (lambda im: Image.fromarray(im).convert("L"), r"\(96, 96\)"),
    (lambda im: im.transpose(2, 0, 1), "channels last"),
    (lambda im: "a picture", "got shape"),
])
def test_images_that_a_cast_would_change_are_refused(vision, rooms, bad, match):
    with pytest.raises(ValueError, match="image 0 .*" + match):
        _score(vision, bad(rooms[0]))


def test_exact_images_of_other_types_score_as_the_uint8_array(vision, rooms):
    want = _score(vision, rooms[0])
    for same in (rooms[0].astype(np.int64), Image.fromarray(rooms[0]), torch.from_numpy(rooms[0]),
                 rooms[0].tolist(), rooms[0][::1, ::-1][:, ::-1]):  # the last one is a strided view
        assert torch.equal(_score(vision, same), want)
    assert not torch.equal(_score(vision, rooms[1]), want)


def test_a_read_only_image_is_read_without_a_warning(vision, rooms):
    frozen = rooms[0].copy()
    frozen.setflags(write=False)  # as np.asarray(PIL image) is
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert torch.equal(_score(vision, frozen), _score(vision, rooms[0]))


# ------------------------------------------------------------------------------ image tokens that are not images
def test_pixel_values_of_another_size_are_a_clear_error(vision):
    model, k = vision.model, vision.model.config.image_seq_len
    ids = torch.tensor([[5] + [model.config.image_token_id] * k + [6]])
    with pytest.raises(ValueError, match=r"pixel_values must be \[N, 3, 96, 96\]"):
        model(input_ids=ids, pixel_values=torch.zeros(1, 3, 64, 64))


def test_a_stray_image_token_is_refused_even_when_the_count_matches(vision, rooms):
    """35 image tokens, text, then one more: the count (36) is one image's, but the last patch would land on the
    stray token; the model must refuse it, not misalign the patches."""
    model = vision.model
    tok, k = model.config.image_token_id, model.config.image_seq_len
    pixels = model.prepare_pixel_values([rooms[0]])
    whole = torch.tensor([[5] + [tok] * k + [6, 7]])
    model(input_ids=whole, pixel_values=pixels)  # a whole image is fine
    split = torch.tensor([[5] + [tok] * (k - 1) + [6, tok, 7]])
    with pytest.raises(ValueError, match=f"run of {k - 1} <image> tokens at position 1"):
        model(input_ids=split, pixel_values=pixels)
    two = torch.tensor([[5] + [tok] * (2 * k) + [6], [5] + [6] * (2 * k) + [7]])  # two adjacent images in one row
    model(input_ids=two, pixel_values=model.prepare_pixel_values([rooms[0], rooms[1]]))


def test_escape_image_token():
    assert escape_image_token("no placeholder", IMAGE_TOKEN) == "no placeholder"
    assert escape_image_token("a <image> b", None) == "a <image> b"
    escaped = escape_image_token("a <image> b <image>", IMAGE_TOKEN)
    assert IMAGE_TOKEN not in escaped and escaped.replace("\u200b", "") == "a <image> b <image>"
    assert "#" not in escape_image_token("x#y", "#")


def test_a_placeholder_spelled_out_by_the_model_is_not_an_image_in_a_windowed_prompt(vision):
    """The model can write "<image>" with ordinary tokens ('<', 'im', 'ag', 'e', '>'); a windowed context re-renders
    that response from its text. It used to become 36 image tokens with no image: the next generate raised."""
    spelled = vision.tokenizer(IMAGE_TOKEN, add_special_tokens=False, split_special_tokens=True)["input_ids"]
    assert vision.model.config.image_token_id not in spelled and vision.decode(spelled) == IMAGE_TOKEN
    env = gym.make("ragen/Sokoban-Vision-v0", disable_env_checker=True).unwrapped
    ep = ChatEpisode(env, length_limit=32, max_turns=3, image_token=vision.image_token)
    ep.reset(0)
    ep.step(f"{vision.decode(spelled)} <answer>Up</answer>")
    msgs, images = ep.prompt_messages(1)
    assert len(images) == 2
    ids = vision.encode_chat(msgs)
    assert ids.count(vision.model.config.image_token_id) == 2 * vision.model.config.image_seq_len
    out = vision.generate([ids], images=[images], max_new_tokens=3, generator=torch.Generator().manual_seed(0))
    assert len(out[0].response_ids) >= 1
    assert ep.history[0][1].startswith(IMAGE_TOKEN)  # the record keeps the response as the model wrote it


class _EchoEnv(gym.Env):
    """A vision env whose text (and instructions) contain the placeholder, as a web page or a document could."""

    observation_space = spaces.Dict({"text": spaces.Text(200), "image": spaces.Box(0, 255, (32, 32, 3), np.uint8)})
    action_space = spaces.Text(200)

    def _obs(self):
        return {"text": "The page says <image> here.", "image": np.full((32, 32, 3), 90, np.uint8)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._obs(), {"instructions": "Pages may show the tag <image>."}

    def step(self, action):
        return self._obs(), 0.0, False, False, {}


def test_a_placeholder_in_the_env_text_is_not_an_image(vision):
    envs = [_EchoEnv() for _ in range(2)]
    settings = RolloutSettings(max_turns=2, context="full", max_new_tokens=4, system_prompt=True)
    batch = rollout(vision, envs, [0], 2, settings, generator=torch.Generator().manual_seed(0))
    assert [len(x) for x in batch.images] == [2, 2]
    assert torch.isfinite(vision.forward_logprobs(batch.input_ids, batch.attention_mask, images=batch.images).logprobs
                          ).all()


# --------------------------------------------------------------------------------------- batch invariance
def test_several_images_per_chat_score_the_same_in_any_batch_order(vision, rooms):
    """Rows with 0, 1 and 2 images and prompts of different lengths: the sampling log-probs equal the teacher-forced
    ones, whatever order the rows are scored in."""
    k = IMAGE_TOKEN
    chats = [f"{k} move", f"{k} first {k} second, longer text here", "no picture at all", f"{k}{k} adjacent"]
    images = [[rooms[0]], [rooms[1], rooms[2]], [], [rooms[3], rooms[0]]]
    prompts = [vision.encode_chat([{"role": "user", "content": c}]) for c in chats]
    gens = vision.generate(prompts, images=images, max_new_tokens=6, stop=(),
                           generator=torch.Generator().manual_seed(1))
    seqs = [g.prompt_ids + g.response_ids for g in gens]
    for order in ([0, 1, 2, 3], [3, 2, 1, 0], [2, 0, 3, 1]):
        ids, mask = vision.pad([seqs[i] for i in order])
        with torch.no_grad():
            lp = vision.forward_logprobs(ids, mask, images=[images[i] for i in order]).logprobs
        for row, i in enumerate(order):
            start, n = len(gens[i].prompt_ids), len(gens[i].response_ids)
            torch.testing.assert_close(lp[row, start:start + n], torch.tensor(gens[i].response_logprobs),
                                       atol=1e-5, rtol=0)


def test_a_scripted_response_holding_the_placeholder_encodes_no_image_token(vision):
    """A scripted responder's text (a demonstrator, a fixed reply) is encoded for training: a literal "<image>" in it
    became the image token with no image behind it, and the next forward refused the batch."""
    envs = [gym.make("ragen/Sokoban-Vision-v0", disable_env_checker=True) for _ in range(2)]
    settings = RolloutSettings(max_turns=1, max_new_tokens=8, length_limit=32)
    batch = rollout(vision, envs, [0], 2, settings, generator=torch.Generator().manual_seed(0),
                    responder=lambda envs, idx: [f"{IMAGE_TOKEN} <answer>Up</answer>"] * len(idx))
    image_id = vision.model.config.image_token_id
    responses = batch.input_ids[batch.loss_mask != 0]
    assert image_id not in responses.tolist()
    with torch.no_grad():  # the batch trains: its image slots are the observations' only
        out = vision.forward_logprobs(batch.input_ids, batch.attention_mask, images=batch.images,
                                      score_mask=batch.loss_mask != 0)
    assert torch.isfinite(out.logprobs[batch.loss_mask != 0]).all()
