"""The algorithm table's helpers."""


def test_token_loss_mode_rewrites_only_the_trajectory_mean():
    from ragen_core.math.advantages import TRAINER_LOSS_AGG_MODES, TRAJ_MEAN
    from ragen_core.training.algorithms import token_loss_mode

    assert token_loss_mode(TRAJ_MEAN) == ("token-mean", True)
    for mode in TRAINER_LOSS_AGG_MODES:
        if mode != TRAJ_MEAN:
            assert token_loss_mode(mode) == (mode, False)
