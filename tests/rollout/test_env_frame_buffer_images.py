"""An env that draws every frame into one buffer and returns it each step (Gymnasium allows it): each turn's image
is the frame of that turn, in the prompts and in the batch (they all became the latest frame)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces

from ragen_core.episode import ChatEpisode


class OneBufferEnv(gym.Env):
    """Three turns; the frame of turn t is filled with 10 t, always in the same array."""

    def __init__(self):
        self.frame = np.zeros((8, 8, 3), dtype=np.uint8)
        self.observation_space = spaces.Dict({"text": spaces.Text(64), "image": spaces.Box(0, 255, (8, 8, 3),
                                                                                            np.uint8)})
        self.action_space = spaces.Text(64)
        self.t = 0

    def _obs(self):
        self.frame[:] = 10 * self.t
        return {"text": f"turn {self.t}", "image": self.frame}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        return self._obs(), 0.0, self.t >= 3, False, {}


def test_each_turn_keeps_its_own_frame():
    ep = ChatEpisode(OneBufferEnv(), length_limit=16, image_token="<image>")
    ep.reset(seed=0)
    while not ep.done:
        ep.step("<think>x</think><answer>go</answer>")
    seen = [int(images[0][0, 0, 0]) for _, _, images in ep.history]
    assert seen == [0, 10, 20]


def test_the_tiny_vision_model_keeps_a_one_pixel_thing_of_a_large_picture():
    """Shrinking a 200x200 picture to the model's 96 by nearest kept about every second row and column: a
    one-pixel object was there or not by where it sat. Averaging keeps a trace of it wherever it sits; enlarging
    (and equal sizes) stays exact."""
    from types import SimpleNamespace

    from ragen_core.policy.tiny import TinyVisionForCausalLM

    # prepare_pixel_values reads only the image size, the device and the dtype (no weights)
    model = SimpleNamespace(config=SimpleNamespace(image_size=96), device=torch.device("cpu"), dtype=torch.float32)
    model.prepare_pixel_values = lambda images: TinyVisionForCausalLM.prepare_pixel_values(model, images)
    empty = np.zeros((200, 200, 3), dtype=np.uint8)
    base = model.prepare_pixel_values([empty])
    for r, c in ((0, 0), (1, 1), (101, 57), (199, 198)):
        dot = empty.copy()
        dot[r, c] = 255
        assert not torch.equal(model.prepare_pixel_values([dot]), base), (r, c)
    small = (np.arange(48 * 48 * 3) % 251).astype(np.uint8).reshape(48, 48, 3)
    up = model.prepare_pixel_values([small])[0]
    want = torch.from_numpy(small).permute(2, 0, 1).float().repeat_interleave(2, 1).repeat_interleave(2, 2)
    assert torch.equal(up, want / 255.0 - 0.5)  # nearest, exactly


def test_a_text_only_model_on_an_env_with_pictures_warns(tmp_path, make_tiny_model):
    """A text-only policy given a vision env trained on the text alone without a word (with obs_format='image'
    that text is one fixed sentence); `ragen eval` refused the same pair. Now the trainer warns, naming both."""
    import warnings

    from ragen_core.training.config import load_config
    from ragen_core.training.trainer import Trainer

    cfg = load_config(None, [f"model.path={make_tiny_model('Player Boxes Targets')}", "env.id=ragen/Sokoban-Vision-v0",
                             "env.kwargs.obs_format=image", "warm_start.sft_episodes=0", "rollout.groups=1",
                             "rollout.group_size=2", "eval.episodes=2", "run.device=cpu"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Trainer(cfg, tmp_path / "run")
    assert any("shows its state in pictures" in str(w.message) for w in caught)
