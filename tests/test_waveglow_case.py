"""The waveglow training case (benchmarks/waveglow/pytorch) against published figures and its
own maths.

* The standard model (NVIDIA's 512-channel WaveGlow) and the 256-channel one have the parameter
  counts Ping et al. publish for WaveGlow (WaveFlow, ICML 2020, arXiv:1912.01219: 268.29 M and
  87.88 M; the abstract's "15x smaller than WaveGlow" is 87.88 M / 5.91 M), built on the meta
  device, and the count the architecture gives in closed form.
* The flow inverts (reverse(forward(x)) = x) and its loss is the negative log-likelihood by the
  change of variables: checked against the log-determinant of the full Jacobian.
* The declared FLOPs per audio sample (case.yml) against torch.utils.flop_counter.
* The recipe's split (``driver.torch.ljspeech.recipe_split`` and its lists, shared with
  tacotron2 and tested in tests/test_tacotron2_case.py): the standard config names the same
  lists as tacotron2's; the cpu profile's split, the items (segments and their mel spectrograms)
  and its target against an untrained model's validation loss.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from case_model import case_config, case_model, case_module
from flagperf_ansible import datasets
from flagperf_ansible.config.case_schema import evaluate_formula
from flagperf_ansible.config.cases import load_case

ROOT = Path(__file__).resolve().parents[1]
CASE_DIR = ROOT / "benchmarks" / "waveglow" / "pytorch"
wg = case_model("waveglow")

#: WaveFlow (Ping, Peng, Zhao and Song, ICML 2020), table of likelihoods on LJSpeech: WaveGlow
#: with 512 and with 256 residual channels, in millions.
PUBLISHED_MILLIONS = {512: 268.29, 256: 87.88}


def config_of(hardware: str = "standard") -> dict:
    return case_config("waveglow", hardware)


@pytest.fixture(scope="module")
def entry():
    """training.py."""
    return case_module("waveglow", "training")


@pytest.fixture(scope="module")
def ljspeech(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("LJSpeech-1.1")
    datasets.prepare("ljspeech", root)
    return root


def closed_form_parameters(c: dict) -> int:
    """WaveGlow's parameters from its architecture: weight-normalised convolutions carry a
    weight ``v``, a gain ``g`` per output channel and a bias."""
    def conv(cin, cout, k=1, norm=True):
        return cout * cin * k + cout + (cout if norm else 0)

    m, g, ch, layers, k = (c["n_mel_channels"], c["n_group"], c["wn_channels"], c["wn_layers"],
                           c["wn_kernel_size"])
    total = m * m * c["upsample_kernel"] + m  # ConvTranspose1d
    remaining = g
    for flow in range(c["n_flows"]):
        if flow and flow % c["n_early_every"] == 0:
            remaining -= c["n_early_size"]
        half = remaining // 2
        total += remaining * remaining  # the invertible 1x1 convolution
        total += conv(half, ch) + conv(ch, 2 * half, norm=False)  # start, end
        total += layers * (conv(ch, 2 * ch, k) + conv(m * g, 2 * ch))
        total += (layers - 1) * conv(ch, 2 * ch) + conv(ch, ch)  # residual and skip
    return total


# -- the catalog against published figures ----------------------------------------------------

@pytest.mark.parametrize("channels", [512, 256])
def test_model_has_the_published_parameter_count(channels):
    config = {**config_of(), "wn_channels": channels}
    with torch.device("meta"):
        net = wg.build_model(config)
    count = sum(p.numel() for p in net.parameters())
    assert count == closed_form_parameters(config)
    assert round(count / 1e6, 2) == PUBLISHED_MILLIONS[channels]
    assert channels != 512 or count == 268_294_760


def test_declared_flops_per_audio_sample_match_torch_counter():
    from torch.utils.flop_counter import FlopCounterMode

    config = config_of()
    spec = load_case(ROOT, "waveglow", "pytorch").spec
    declared = evaluate_formula(spec.mfu.flops_per_unit.formula, config)
    samples = config["segment_length"]
    with torch.device("meta"):
        net = wg.build_model(config)
        mel = torch.empty(1, 80, samples // config["hop_length"] + 1)
        audio = torch.empty(1, samples)
    with FlopCounterMode(display=False) as counter:
        wg.waveglow_loss(net(mel, audio)).backward()
    counted = counter.get_total_flops() / samples
    assert declared == pytest.approx(counted, rel=5e-4)
    assert declared == pytest.approx(1.9598e8, rel=1e-4)


# -- the model's maths ----------------------------------------------------------------------------

def small_model(seed: int = 0) -> torch.nn.Module:
    """A small WaveGlow whose couplings are not the identity (the end convolutions start at 0)."""
    torch.manual_seed(seed)
    net = wg.build_model({"n_flows": 4, "n_early_every": 2, "wn_layers": 2, "wn_channels": 8,
                          "n_mel_channels": 8, "upsample_kernel": 16, "hop_length": 4})
    with torch.no_grad():
        for coupling in net.WN:
            coupling.end.weight.normal_(std=0.2)
            coupling.end.bias.normal_(std=0.2)
    return net.double().eval()


def test_reverse_inverts_forward():
    net = small_model()
    mel = torch.randn(2, 8, 9, dtype=torch.float64)
    audio = 0.3 * torch.randn(2, 32, dtype=torch.float64)
    with torch.no_grad():
        z = net(mel, audio)[0]
        assert z.shape == (2, 8, 4)
        assert torch.allclose(net.reverse(z, mel), audio, atol=1e-10)
        # infer() draws z for F x hop samples and inverts it.
        assert net.infer(mel[:, :, :8]).shape == (2, 8 * 4)


def test_loss_is_the_negative_log_likelihood_by_the_change_of_variables():
    net = small_model(seed=1)
    mel = torch.randn(1, 8, 5, dtype=torch.float64)
    audio = 0.3 * torch.randn(1, 16, dtype=torch.float64)
    sigma = 0.7
    with torch.no_grad():
        loss = wg.waveglow_loss(net(mel, audio), sigma)
    jacobian = torch.autograd.functional.jacobian(
        lambda x: net(mel, x.view(1, -1))[0].reshape(-1), audio.reshape(-1))
    z = net(mel, audio)[0]
    nll = (z * z).sum() / (2 * sigma ** 2) - torch.linalg.slogdet(jacobian)[1]
    nll = nll.detach()
    assert float(loss) == pytest.approx(float(nll) / 16, rel=1e-9)


def test_an_untrained_model_is_the_identity_up_to_a_rotation():
    """End convolutions at zero and W orthonormal with det +1: log_s = 0, log|det W| = 0, so the
    loss is sum x^2 / (2 sigma^2 N)."""
    torch.manual_seed(0)
    net = wg.build_model({"n_flows": 4, "n_early_every": 2, "wn_layers": 2, "wn_channels": 8})
    for conv in net.convinv:
        assert float(torch.det(conv.weight.detach())) == pytest.approx(1.0, abs=1e-5)
    mel, audio = torch.randn(2, 80, 5), 0.3 * torch.randn(2, 1024)
    with torch.no_grad():
        loss = wg.waveglow_loss(net(mel, audio))
    assert float(loss) == pytest.approx(float((audio ** 2).sum() / 2 / audio.numel()), rel=1e-4)


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="n_group 7 and n_early_size 2 must be even"):
        wg.build_model({"n_group": 7})
    with pytest.raises(ValueError, match="must be odd"):
        wg.build_model({"wn_kernel_size": 4, "wn_channels": 8, "n_flows": 1})
    net = wg.build_model({"n_flows": 1, "wn_layers": 1, "wn_channels": 8})
    with pytest.raises(ValueError, match="2 mel frames upsample to 1280 < 2048 audio samples"):
        net(torch.zeros(1, 80, 2), torch.zeros(1, 2048))


# -- data --------------------------------------------------------------------------------------

def test_standard_config_splits_ljspeech_as_tacotron2():
    config, tacotron2 = config_of(), case_config("tacotron2")
    keys = ("validation_files", "excluded_files", "val_clips")
    assert {key: config[key] for key in keys} == {key: tacotron2[key] for key in keys} == {
        "validation_files": "ljs_val_clips.txt", "excluded_files": "ljs_test_clips.txt",
        "val_clips": None}
    assert "training_files" not in config


def test_cpu_profile_holds_out_clips_and_makes_items(entry, ljspeech):
    config = config_of("cpu")
    case = entry.waveglow_case(config, ljspeech)
    train, val = case.train_set.clip_ids, case.val_set.clip_ids
    assert val == config["val_clips"] and not set(train) & set(val)
    assert len(train) + len(val) == 19
    assert case.model_info["train_clips"] == len(train)
    segment = config["segment_length"]
    assert len(case.train_set) == len(train) * config["train_repeats"]
    mel, audio = case.train_set[0]
    assert audio.shape == (segment,)
    assert mel.shape == (config["n_mel_channels"], segment // 256 + 1)
    assert float(audio.abs().max()) <= 1.0
    # Validation segments are the clips' centres, the same every time.
    assert torch.equal(case.val_set[0][1], case.val_set[0][1])
    assert case.units[0] == "audio_samples"
    batch = torch.utils.data.default_collate([case.train_set[0], case.train_set[1]])
    assert case.units[1](batch) == 2 * segment


def test_short_clips_are_zero_padded(entry, ljspeech):
    config = {**config_of("cpu"), "segment_length": 200_000}
    segments = entry.AudioSegments(ljspeech, ["LJ001-0001"], config, random_segment=True)
    mel, audio = segments[0]
    assert audio.shape == (200_000,) and not audio[-1000:].any()


def test_cpu_target_is_well_below_an_untrained_model(entry, ljspeech):
    config = config_of("cpu")
    case = entry.waveglow_case(config, ljspeech)
    torch.manual_seed(0)
    net = case.build_model().eval()
    loader = torch.utils.data.DataLoader(case.val_set, batch_size=8)
    sums = {"loss_sum": 0.0, "clips": 0.0}
    with torch.no_grad():
        for batch in loader:
            for key, value in case.eval_sums(net, batch).items():
                sums[key] += value
    untrained = case.eval_metric(sums)
    assert abs(untrained) < 0.05  # sum x^2 / 2N for audio of std ~0.1
    assert config["target_val_loss"] <= untrained - 2.0
