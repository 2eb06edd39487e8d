"""The entropy filters (Trinity-RFT's clipb / clipv, rft.algorithms.entropy_clip) by hand: the old pass's statistics
from logits, which tokens each filter drops, Clip_V's cap, and the trainer dropping them from the loss."""

from __future__ import annotations

import math

import pytest
import torch
from test_config import load

from rft.algorithms import EntropyClipInputs, entropy_clip_keep, entropy_statistics_from_logits
from rft.config import ConfigError


def test_entropy_and_n_of_a_two_token_distribution_by_hand():
    # p = (3/4, 1/4): H = 3/4 ln(4/3) + 1/4 ln 4 = 0.562335; sum p^2 = 5/8; sum p^2 ln p = 9/16 ln(3/4) + 1/16 ln(1/4)
    h, n = entropy_statistics_from_logits(torch.tensor([[math.log(3.0), 0.0]]))
    H = 0.75 * math.log(4 / 3) + 0.25 * math.log(4)
    N = H * 0.625 + 0.5625 * math.log(0.75) + 0.0625 * math.log(0.25)
    assert h.item() == pytest.approx(H, abs=1e-6) and h.item() == pytest.approx(0.562335, abs=1e-6)
    assert n.item() == pytest.approx(N, abs=1e-6) and n.item() == pytest.approx(0.102995, abs=1e-6)
    # N is S = p (H + log p) averaged over the distribution: 3/4 S(3/4) + 1/4 S(1/4)
    s = [p * (H + math.log(p)) for p in (0.75, 0.25)]
    assert n.item() == pytest.approx(0.75 * s[0] + 0.25 * s[1], abs=1e-6)


def test_chunks_do_not_change_the_statistics():
    logits = torch.randn(3, 5, 11, generator=torch.Generator().manual_seed(0))
    whole = entropy_statistics_from_logits(logits, chunk_size=None)
    for a, b in zip(whole, entropy_statistics_from_logits(logits, chunk_size=2)):
        assert a.shape == (3, 5)
        torch.testing.assert_close(a, b)


def _inputs(s, adv, nec=None):
    """log p = 0 (p = 1), so S = p (H + log p) is the entropy given: the filters' choices by hand."""
    s = torch.tensor([s], dtype=torch.float32)
    return EntropyClipInputs(advantages=torch.tensor([adv], dtype=torch.float32), response_mask=torch.ones_like(s),
                             old_logprobs=torch.zeros_like(s), entropy=s,
                             nec=None if nec is None else s + torch.tensor([nec], dtype=torch.float32))


def test_clipb_drops_negative_advantage_tokens_far_below_the_mean():
    # S = (1 x 7, -7): mean 0, population variance (7 + 49) / 8 = 7, std 2.6458; mu 2.5: bound -6.614
    s = [1.0] * 7 + [-7.0]
    keep, metrics = entropy_clip_keep("clipb", _inputs(s, [-1.0] * 8), mu=2.5)
    assert keep.tolist() == [[True] * 7 + [False]]
    assert metrics["std"] == pytest.approx(math.sqrt(7), abs=1e-6)
    assert metrics["frac_clipped"] == pytest.approx(1 / 8) and metrics["frac_clipped_neg"] == pytest.approx(1 / 8)
    # positive and zero advantages are kept; mu 3 puts the bound at -7.94
    assert entropy_clip_keep("clipb", _inputs(s, [-1.0] * 7 + [1.0]), mu=2.5)[0].all()
    assert entropy_clip_keep("clipb", _inputs(s, [-1.0] * 7 + [0.0]), mu=2.5)[0].all()
    assert entropy_clip_keep("clipb", _inputs(s, [-1.0] * 8), mu=3.0)[0].all()


def test_clipb_takes_s_from_the_sampled_tokens_probability():
    # p = 1/2, H = 1: S = (1 - ln 2) / 2 = 0.1534; seven tokens of p = 1, H = 0.1534 (the same S) and one of S = -7
    lp = torch.tensor([[math.log(0.5)] + [0.0] * 6 + [0.0]])
    H = torch.tensor([[1.0] + [0.5 * (1 - math.log(2))] * 6 + [-7.0]])
    inputs = EntropyClipInputs(advantages=-torch.ones(1, 8), response_mask=torch.ones(1, 8), old_logprobs=lp,
                               entropy=H)
    keep, metrics = entropy_clip_keep("clipb", inputs, mu=2.0)
    assert keep.tolist() == [[True] * 7 + [False]]
    assert metrics["mean_s"] == pytest.approx((7 * 0.5 * (1 - math.log(2)) - 7) / 8, abs=1e-6)


def test_clipv_drops_tokens_whose_d_exceeds_mu_stds():
    # D = N - S = (0 x 7, 8): mean 1, variance (7 + 49) / 8 = 7, std 2.6458; mu 2.5: bound 6.614 (not centred)
    d = [0.0] * 7 + [8.0]
    keep, metrics = entropy_clip_keep("clipv", _inputs([0.5] * 8, [-1.0] * 8, d), mu=2.5, max_frac=0.5)
    assert keep.tolist() == [[True] * 7 + [False]] and metrics["std"] == pytest.approx(math.sqrt(7), abs=1e-6)
    # a zero advantage is filtered as a negative one (Trinity-RFT's code); a positive one is kept
    assert not entropy_clip_keep("clipv", _inputs([0.5] * 8, [-1.0] * 7 + [0.0], d), mu=2.5)[0][0, 7]
    assert entropy_clip_keep("clipv", _inputs([0.5] * 8, [-1.0] * 7 + [1.0], d), mu=2.5)[0].all()


def test_clipv_caps_its_share_keeping_the_largest_d_out():
    # D = (0 x 6, 9, 10): mean 2.375, variance 16.984, std 4.1212; mu 2: bound 8.242, both over it
    d = [0.0] * 6 + [9.0, 10.0]
    # 2 of 8 tokens (0.25) over max_frac 0.125: the cap is int(0.125 x 8) = 1 token, the one of D = 10
    keep, _ = entropy_clip_keep("clipv", _inputs([0.5] * 8, [-1.0] * 8, d), mu=2.0, max_frac=0.125)
    assert keep.tolist() == [[True] * 7 + [False]]
    keep, _ = entropy_clip_keep("clipv", _inputs([0.5] * 8, [-1.0] * 8, d), mu=2.0, max_frac=0.25)
    assert keep.tolist() == [[True] * 6 + [False, False]]
    # Trinity-RFT's default cap (1e-4 of 8 tokens) still drops one token: at least one
    keep, _ = entropy_clip_keep("clipv", _inputs([0.5] * 8, [-1.0] * 8, d), mu=2.0)
    assert keep.tolist() == [[True] * 7 + [False]]


def test_masked_tokens_and_a_flat_batch_keep_everything():
    inputs = _inputs([1.0] * 7 + [-7.0], [-1.0] * 8)
    inputs.response_mask[0, 7] = 0  # the outlier is padding: the rest has std 0
    keep, metrics = entropy_clip_keep("clipb", inputs, mu=2.5)
    assert keep.tolist() == [[True] * 7 + [False]] and metrics["frac_clipped"] == 0.0


@pytest.mark.parametrize("option, needle", [
    ("algorithm.entropy_clip.mu=0", "algorithm.entropy_clip.mu=0.0 must be a number > 0"),
    ("algorithm.entropy_clip.max_frac=0", "algorithm.entropy_clip.max_frac=0.0 must be in (0, 1]"),
    ("algorithm.rollout_correction.bypass_mode=true", "skips"),
])
def test_bad_filter_options_are_refused(option, needle):
    with pytest.raises(ConfigError) as err:
        load("algorithm.entropy_clip.mode=clipv", option)
    assert needle in str(err.value), str(err.value)
