"""The tacotron2 training case (benchmarks/tacotron2/pytorch) against upstream's recipe, and the
LJSpeech helpers it stands on (benchmarks/driver/torch/ljspeech.py, the ``ljspeech`` format).

* The standard model has the parameter count of NVIDIA's Tacotron 2, counted layer by layer
  from upstream's ``model.py`` (no count is published), built on the meta device.
* Text: upstream's 148 symbols and ids, english_cleaners' numbers and abbreviations, ARPAbet.
* The recipe's maths: the loss over padded batches, the collate, the learning-rate annealing,
  mel frames counted without padding.
* Data: the recipe's validation and test lists and ``ljspeech.recipe_split`` (shared with
  waveglow, tested here once), the tiny LJSpeech, the checker, the mels (the recipe's STFT
  against a numpy reference of NVIDIA's ``TacotronSTFT`` with librosa's filters).
* The cpu profile's target is far below the validation loss of an untrained model and of one
  predicting the mean spectrum.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from case_model import case_config, case_model, case_module
from driver.torch import ljspeech
from flagperf_ansible import datasets

ROOT = Path(__file__).resolve().parents[1]
CASE_DIR = ROOT / "benchmarks" / "tacotron2" / "pytorch"


def tacotron2_module(name: str):
    return case_module("tacotron2", name)


def profile_config(hardware: str = "standard") -> dict:
    return case_config("tacotron2", hardware)


def nvidia_parameter_count(c: dict) -> int:
    """Parameters of NVIDIA's Tacotron2 (upstream ``model/models/model.py``) for config ``c``,
    layer by layer: embedding; encoder convolutions (with bias) + BatchNorm and a
    bidirectional LSTM of half width; prenet (two bias-free linears); attention LSTM cell;
    attention (query, memory, v, location conv and dense, all bias-free); decoder LSTM cell;
    mel projection and gate (with bias); postnet convolutions + BatchNorm."""
    def lstm(inputs, hidden):  # weights ih and hh, biases ih and hh
        return 4 * hidden * (inputs + hidden) + 8 * hidden

    emb, enc, mels = c["symbols_embedding_dim"], c["encoder_embedding_dim"], c["n_mel_channels"]
    pre, att_rnn, dec_rnn = c["prenet_dim"], c["attention_rnn_dim"], c["decoder_rnn_dim"]
    att, post = c["attention_dim"], c["postnet_embedding_dim"]
    k_enc, k_post = c["encoder_kernel_size"], c["postnet_kernel_size"]
    filters, k_loc = c["attention_location_n_filters"], c["attention_location_kernel_size"]
    count = c["n_symbols"] * emb
    count += c["encoder_n_convolutions"] * (enc * enc * k_enc + enc + 2 * enc)
    count += 2 * lstm(enc, enc // 2)
    count += mels * pre + pre * pre
    count += lstm(pre + enc, att_rnn)
    count += att_rnn * att + enc * att + att + 2 * filters * k_loc + filters * att
    count += lstm(att_rnn + enc, dec_rnn)
    count += (dec_rnn + enc) * mels + mels + (dec_rnn + enc) + 1
    count += mels * post * k_post + post + 2 * post
    count += (c["postnet_n_convolutions"] - 2) * (post * post * k_post + post + 2 * post)
    count += post * mels * k_post + mels + 2 * mels
    return count


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ljspeech")
    datasets.prepare("ljspeech", root)
    return root


# -- the model -------------------------------------------------------------------------------

@pytest.mark.parametrize("hardware, expected", [("standard", 28_193_153), ("cpu", None)])
def test_model_has_nvidia_tacotron2s_parameter_count(hardware, expected):
    config = profile_config(hardware)
    with torch.device("meta"):
        net = case_model("tacotron2").build_model(config)
    count = sum(p.numel() for p in net.parameters())
    assert count == nvidia_parameter_count(config)
    if expected:  # 28.2 M: NVIDIA's fp32 checkpoints are 113 MB (4 bytes a parameter)
        assert count == expected
    else:
        assert count < 1_000_000


def test_batchnorm_weights_start_uniform_as_upstreams_init_bn():
    config = profile_config("cpu")
    torch.manual_seed(0)
    net = case_model("tacotron2").build_model(config)
    weights = torch.cat([m.weight.detach() for m in net.modules()
                         if isinstance(m, torch.nn.BatchNorm1d)])
    assert 0.0 <= weights.min() and weights.max() < 1.0 and weights.std() > 0.1
    config["disable_uniform_initialize_bn_weight"] = True
    net = case_model("tacotron2").build_model(config)
    assert all(torch.equal(m.weight, torch.ones_like(m.weight)) for m in net.modules()
               if isinstance(m, torch.nn.BatchNorm1d))


@pytest.mark.parametrize("key, value, message", [
    ("n_frames_per_step", 2, "config n_frames_per_step: 2, only 1"),
    ("symbols_embedding_dim", 256, "config symbols_embedding_dim: must equal"),
])
def test_unsupported_model_settings_are_refused(key, value, message):
    config = profile_config("cpu") | {key: value}
    with pytest.raises(ValueError, match=message):
        case_model("tacotron2").build_model(config)


def test_loss_is_nvidias_over_the_padded_batch():
    model = case_model("tacotron2")
    torch.manual_seed(0)
    mel, gate = torch.randn(2, 80, 7), torch.zeros(2, 7)
    gate[0, 6:], gate[1, 4:] = 1.0, 1.0
    outputs = (torch.randn(2, 80, 7), torch.randn(2, 80, 7), torch.randn(2, 7))
    expected = (((outputs[0] - mel) ** 2).mean() + ((outputs[1] - mel) ** 2).mean()
                + torch.nn.BCEWithLogitsLoss()(outputs[2].reshape(-1, 1), gate.reshape(-1, 1)))
    assert torch.allclose(model.tacotron2_loss(outputs, mel, gate), expected)


# -- text ------------------------------------------------------------------------------------

def test_symbols_are_upstreams_148():
    text = tacotron2_module("tts_text")
    assert len(text.SYMBOLS) == 148 == profile_config()["n_symbols"]
    assert text.SYMBOLS[:12] == ["_", "-", "!", "'", "(", ")", ",", ".", ":", ";", "?", " "]
    assert (text.SYMBOL_IDS["A"], text.SYMBOL_IDS["a"], text.SYMBOL_IDS["@AA"]) == (12, 38, 64)
    assert text.SYMBOLS[-1] == "@ZH" and len(set(text.SYMBOLS)) == 148


@pytest.mark.parametrize("raw, cleaned", [
    ("Mr. Müller paid $3.50 on the 2nd of May, 1835.",
     "mister mueller paid three dollars, fifty cents on the second of may, eighteen thirty-five."),
    ("Dr.  Smith's “1,234,567” men\tin 1905, 2000, 2004 and 1900",
     "doctor smith's \"one million, two hundred thirty-four thousand, five hundred sixty-seven\" "
     "men in nineteen oh five, two thousand, two thousand four and nineteen hundred"),
    # upstream's tables have no "£" nor "—": dropped before the numbers are read
    ("£40 or 3.14—for the 21st and 100th",
     "forty or three point fourteenfor the twenty-first and one hundredth"),
])
def test_english_cleaners_spell_numbers_and_abbreviations(raw, cleaned):
    assert tacotron2_module("tts_text").english_cleaners(raw) == cleaned


def test_text_to_sequence_keeps_symbols_and_reads_arpabet():
    text = tacotron2_module("tts_text")
    ids = text.text_to_sequence('Turn "left" on {HH AW1 S S T AH0 N} St.', ["english_cleaners"])
    assert "".join(text.SYMBOLS[i] for i in ids[:13]) == "turn left on "  # '"' is no symbol
    assert [text.SYMBOLS[i] for i in ids[13:20]] == ["@HH", "@AW1", "@S", "@S", "@T", "@AH0",
                                                     "@N"]
    assert "".join(text.SYMBOLS[i] for i in ids[20:]) == " saint"  # "st." is an abbreviation
    with pytest.raises(ValueError, match="config text_cleaners: unknown"):
        text.text_to_sequence("a", ["german_cleaners"])


# -- data ------------------------------------------------------------------------------------

def test_recipe_lists_split_ljspeech_as_nvidias():
    # The lists of both speech cases (waveglow's standard config names the same ones).
    config = profile_config()
    val = ljspeech.read_clip_list(ljspeech.LISTS_DIR / config["validation_files"])
    test = ljspeech.read_clip_list(ljspeech.LISTS_DIR / config["excluded_files"])
    assert (len(val), len(set(val)), len(test), len(set(test))) == (100, 100, 500, 500)
    assert not set(val) & set(test)
    assert val[:2] == ["LJ022-0023", "LJ043-0030"] and test[-1] == "LJ050-0209"
    assert all(re.fullmatch(r"LJ\d{3}-\d{4}", clip_id) for clip_id in val + test)


def test_recipe_split_of_the_tiny_data_and_its_errors(tiny, tmp_path):
    config = profile_config("cpu")
    train, val = ljspeech.recipe_split(config, tiny)
    assert [c.clip_id for c in val] == config["val_clips"] and len(train) == 16
    assert not {c.clip_id for c in train} & set(config["val_clips"])
    # A list outside ljspeech_lists/ by its absolute path: one comment, one validated clip.
    excluded = tmp_path / "excluded.txt"
    excluded.write_text("# a clip of the cpu profile's val_clips\nLJ001-0004\n")
    train, _ = ljspeech.recipe_split(config | {"val_clips": ["LJ001-0001"],
                                               "excluded_files": str(excluded)}, tiny)
    assert [c.clip_id for c in train][:3] == ["LJ001-0002", "LJ001-0003", "LJ001-0005"]
    with pytest.raises(ValueError, match=r"excluded_files: 1 clip\(s\) .* also validated"):
        ljspeech.recipe_split(config | {"excluded_files": str(excluded)}, tiny)
    with pytest.raises(ValueError, match="held-out clips not in metadata.csv: LJ022-0023"):
        ljspeech.recipe_split(profile_config(), tiny)  # the real lists on the tiny data
    with pytest.raises(ValueError, match=r"excluded_files: 100 clip\(s\) not in .*metadata.csv"):
        ljspeech.recipe_split(config | {"excluded_files": "ljs_val_clips.txt",
                                        "val_clips": ["LJ001-0001"]}, tiny)
    with pytest.raises(ValueError, match="set validation_files or val_clips"):
        ljspeech.recipe_split(config | {"val_clips": None}, tiny)
    with pytest.raises(FileNotFoundError, match="no_such_list.txt"):
        ljspeech.recipe_split(config | {"validation_files": "no_such_list.txt"}, tiny)


def test_collate_sorts_pads_and_sets_the_gate():
    textmel = tacotron2_module("textmel")
    items = [(torch.tensor([5, 6]), torch.full((80, 3), 1.0)),
             (torch.tensor([7, 8, 9]), torch.full((80, 5), 2.0))]
    text, text_lengths, mel, gate, mel_lengths = textmel.collate(items)
    assert text.tolist() == [[7, 8, 9], [5, 6, 0]] and text_lengths.tolist() == [3, 2]
    assert mel_lengths.tolist() == [5, 3] and mel.shape == (2, 80, 5)
    assert mel[1, :, 3:].abs().sum() == 0 and (mel[1, :, :3] == 1.0).all()
    assert gate.tolist() == [[0, 0, 0, 0, 1], [0, 0, 1, 1, 1]]


def test_case_counts_mel_frames_without_padding(tiny):
    case = tacotron2_module("training").tacotron2_case(profile_config("cpu"), tiny)
    items = [case.train_set[0], case.train_set[7]]
    batch = case.collate_fn(items)
    frames = sum(item[1].shape[1] for item in items)
    assert case.units[0] == "mel_frames" and case.units[1](batch) == frames
    assert frames < batch[2].shape[0] * batch[2].shape[2]  # the padding is not counted
    assert len(case.train_set) == 16 and len(case.val_set) == 3


def test_mels_from_disk_are_read_as_upstream(tiny, tmp_path):
    textmel = tacotron2_module("textmel")
    clips = ljspeech.read_metadata(tiny)[:1]
    computed = textmel.TextMelDataset(tiny, clips, {})[0][1]
    (tmp_path / "mels").mkdir()
    torch.save(computed, tmp_path / "mels" / "LJ001-0001.pt")
    stored = textmel.TextMelDataset(tmp_path, clips, {"load_mel_from_disk": True})
    assert torch.equal(stored[0][1], computed)
    torch.save(computed[:40], tmp_path / "mels" / "LJ001-0001.pt")
    with pytest.raises(ValueError, match=r"LJ001-0001.pt: expected a tensor \[80, frames\]"):
        stored[0]


def reference_mel(audio: np.ndarray) -> np.ndarray:
    """NVIDIA's ``TacotronSTFT.mel_spectrogram`` in numpy: Hann window of 1024 (periodic),
    reflect padding of 512, magnitude of the 1024-point FFT every 256 samples, librosa's Slaney
    mel filters (80, 0-8000 Hz, area-normalised), ``log(max(x, 1e-5))``."""
    n_fft, hop, rate, n_mels, fmax = 1024, 256, 22050, 80, 8000.0

    def hz_to_mel(f):  # Slaney's scale: linear below 1 kHz, logarithmic above
        f = np.asarray(f, dtype=np.float64)
        return np.where(f < 1000, f * 3 / 200, 15 + np.log(np.maximum(f, 1e-9) / 1000)
                        / (np.log(6.4) / 27))

    def mel_to_hz(m):
        return np.where(m < 15, m * 200 / 3, 1000 * np.exp((m - 15) * np.log(6.4) / 27))

    edges = mel_to_hz(np.linspace(hz_to_mel(0.0), hz_to_mel(fmax), n_mels + 2))
    bins = np.linspace(0, rate / 2, n_fft // 2 + 1)
    ramps = edges[:, None] - bins[None, :]
    lower = -ramps[:-2] / np.diff(edges)[:-1, None]
    upper = ramps[2:] / np.diff(edges)[1:, None]
    filters = np.maximum(0, np.minimum(lower, upper)) * (2 / (edges[2:] - edges[:-2]))[:, None]
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)
    padded = np.pad(audio.astype(np.float64), n_fft // 2, mode="reflect")
    count = 1 + (len(padded) - n_fft) // hop
    frames = np.stack([padded[i * hop:i * hop + n_fft] for i in range(count)])
    magnitude = np.abs(np.fft.rfft(frames * window, axis=1)).T
    return np.log(np.maximum(filters @ magnitude, 1e-5))


def test_mel_spectrogram_is_the_recipes(tiny):
    audio = ljspeech.load_audio(tiny, "LJ001-0007")
    mel = ljspeech.MelSpectrogram()(audio)
    expected = reference_mel(audio.numpy())
    assert mel.shape == expected.shape == (80, len(audio) // 256 + 1)
    assert np.abs(mel.numpy() - expected).max() < 1e-3


def test_load_audio_refuses_another_rate(tiny, tmp_path):
    from flagperf_ansible.datasets.ljspeech import write_wav

    (tmp_path / "wavs").mkdir()
    write_wav(tmp_path / "wavs" / "x.wav", np.zeros(160, dtype=np.int16), 16000)
    with pytest.raises(ValueError, match="x.wav: 16000 Hz, 1 channels, PCM_16; expected 22050"):
        ljspeech.load_audio(tmp_path, "x")
    audio = ljspeech.load_audio(tiny, "LJ001-0001")
    assert audio.dtype == torch.float32 and audio.abs().max() <= 1.0


def test_tiny_ljspeech_passes_its_checker_and_an_empty_normalized_text_does_not(tiny, tmp_path):
    assert datasets.check("ljspeech", tiny) == []
    root = tmp_path / "broken"
    datasets.prepare("ljspeech", root)
    lines = (root / "metadata.csv").read_text(encoding="utf-8").splitlines(keepends=True)
    lines[2] = "LJ001-0003|Simple is better than complex.| \n"
    (root / "metadata.csv").write_text("".join(lines), encoding="utf-8")
    assert datasets.check("ljspeech", root) == [
        "metadata.csv: 1 line(s) are not id|text|normalized text: line 3"]


# -- schedule and target ---------------------------------------------------------------------

@pytest.mark.parametrize("epoch, factor", [(1, 1.0), (499, 1.0), (500, 0.3), (999, 0.3),
                                           (1000, 0.1), (1500, 0.03), (1501, 0.03)])
def test_learning_rate_anneals_as_the_recipe(epoch, factor):
    config = profile_config()
    got = tacotron2_module("textmel").anneal_factor(epoch, config["lr_anneal_steps"],
                                               config["lr_anneal_factor"])
    assert math.isclose(got, factor)


def test_scheduler_anneals_by_the_epoch_of_each_update():
    textmel = tacotron2_module("textmel")
    optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=1e-3)
    scheduler = textmel.anneal_scheduler(optimizer, 2.5, {"lr_anneal_steps": [2, 3],
                                                          "lr_anneal_factor": 0.5})
    rates = []
    for _ in range(8):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    # updates 0-2 in epoch 1, 3-4 in epoch 2, 5-7 in epoch 3 (2.5 updates an epoch)
    assert [round(r / 1e-3, 6) for r in rates] == [1, 1, 1, 0.5, 0.5, 0.25, 0.25, 0.25]


def test_cpu_target_is_far_below_an_untrained_and_a_mean_spectrum_models_loss(tiny):
    config = profile_config("cpu")
    case = tacotron2_module("training").tacotron2_case(config, tiny)
    torch.manual_seed(config["seed"])
    model = case.build_model().eval()
    text, text_lengths, mel, gate, mel_lengths = case.eval_collate_fn(
        [case.val_set[i] for i in range(len(case.val_set))])
    with torch.no_grad():
        untrained = case.eval_sums(model, (text, text_lengths, mel, gate, mel_lengths))["loss"]
    assert untrained > 5 * config["target_val_loss"]
    # Predicting each mel channel's mean over the training frames, and the training batches'
    # stop share: what a model learns without following the text or the previous frames (the
    # case's input-blind predictor, which its rounds score).
    assert case.input_blind(model) > 2 * config["target_val_loss"]
