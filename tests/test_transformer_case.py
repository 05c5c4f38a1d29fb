"""The transformer case: Transformer big's parameter count on the meta device against the
published one, the declared FLOPs against torch.utils.flop_counter, the reader of fairseq's
binarized layout (both index kinds) and its token batches, the loss, schedule and BLEU maths
against fairseq's and sacrebleu's, and the gettext catalogues behind the tiny corpus."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
import sacrebleu
import torch
import yaml

from case_model import case_config, case_model, case_module
from flagperf_ansible import datasets
from flagperf_ansible.config.cases import load_case
from flagperf_ansible.datasets import wmt14_en_de_fairseq, wmt14_en_de_text
from flagperf_ansible.results.mfu import flops_per_unit

ROOT = Path(__file__).resolve().parents[1]
CASE_DIR = ROOT / "benchmarks" / "transformer" / "pytorch"
training = case_module("transformer", "training")
wmt = case_module("transformer", "wmt")

CASE = load_case(ROOT, "transformer", "pytorch")


def profile_config(hardware: str = "standard") -> dict:
    return case_config("transformer", hardware)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("wmt14_en_de_fairseq")
    datasets.prepare("wmt14_en_de_fairseq", root)
    return root


# -- the model against published figures ------------------------------------------------------

def test_transformer_big_has_the_published_parameter_count():
    config = profile_config()
    with torch.device("meta"):
        model = case_model("transformer").build_model(config)
    count = sum(p.numel() for p in model.parameters())
    d, f, layers, vocab = 1024, 4096, 6, 33712
    encoder_layer = 4 * (d * d + d) + (d * f + f) + (f * d + d) + 2 * 2 * d
    decoder_layer = 8 * (d * d + d) + (d * f + f) + (f * d + d) + 3 * 2 * d
    assert count == layers * (encoder_layer + decoder_layer) + 2 * 2 * d + vocab * d == 210_882_560
    # Vaswani et al. 2017, table 3: "big", 213 x 10^6 (with a 37 k vocabulary).
    assert abs(count - 213e6) / 213e6 < 0.015
    # transformer_wmt_en_de_big_t2t: pre-norm with a final norm per stack, all embeddings shared.
    assert model.config.vocab_size == config["dictionary_size"] == 33712
    assert model.lm_head.weight is model.model.shared.weight
    assert model.model.encoder.embed_tokens.weight is model.model.shared.weight
    assert model.model.encoder.layer_norm is not None and model.model.decoder.layer_norm is not None


def test_declared_flops_match_torch_flop_counter():
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import M2M100ForConditionalGeneration

    config = dict(profile_config(), encoder_layers=2, decoder_layers=3, encoder_embed_dim=64,
                  decoder_embed_dim=64, encoder_ffn_embed_dim=96, decoder_ffn_embed_dim=96,
                  encoder_attention_heads=4, decoder_attention_heads=4, dictionary_size=120,
                  mfu_sentence_tokens=10, dropout=0.0, attention_dropout=0.0, relu_dropout=0.0)
    model = case_model("transformer").build_model(config)
    # Attention as matrix products (the counter does not know every fused CPU kernel).
    model = M2M100ForConditionalGeneration._from_config(model.config,
                                                         attn_implementation="eager")
    tokens = config["mfu_sentence_tokens"]
    source = torch.randint(4, 120, (3, tokens))
    target = torch.randint(4, 120, (3, tokens))
    with FlopCounterMode(display=False) as counter:
        logits = model(input_ids=source, decoder_input_ids=target).logits
        training.label_smoothed_loss(logits, target, 0.1).backward()
    declared = flops_per_unit(CASE.spec.mfu.flops_per_unit.model_dump(), config)
    assert counter.get_total_flops() == pytest.approx(declared * 3 * tokens, rel=1e-9)
    # Transformer big: 1.27e9 per target token.
    assert flops_per_unit(CASE.spec.mfu.flops_per_unit.model_dump(), profile_config()) == \
        pytest.approx(1.2703e9, rel=1e-4)


# -- reading fairseq's layout -------------------------------------------------------------------

@pytest.mark.parametrize("impl", ["cached", "mmap"])
def test_reader_decodes_both_index_kinds_to_the_text(tmp_path, impl):
    wmt14_en_de_fairseq.write_binarized(tmp_path, impl=impl)
    assert datasets.check("wmt14_en_de_fairseq", tmp_path) == []
    dictionary = wmt.Dictionary(tmp_path / "dict.en.txt")
    symbols = set(dictionary.symbols)
    splits, _ = wmt14_en_de_text.split_pairs()
    for split in ("train", "test"):
        for side, lang in enumerate(("en", "de")):
            sentences = wmt.IndexedSentences(tmp_path / f"{split}.en-de.{lang}")
            assert len(sentences) == len(splits[split])
            for i in (0, len(sentences) - 1):
                assert sentences[i][-1] == wmt.EOS and sentences.sizes[i] == len(sentences[i])
                tokens = wmt14_en_de_text.tokenize(splits[split][i][side])
                assert dictionary.string(sentences[i]) == " ".join(
                    t if t in symbols else "<unk>" for t in tokens)
    assert (tmp_path / "test.raw.de").read_text(encoding="utf-8").splitlines() == \
        [german for _, german in splits["test"]]


def test_a_bad_index_or_dictionary_is_one_error_naming_the_file(tiny, tmp_path):
    (tmp_path / "x.idx").write_bytes(b"NOTANIDX" + bytes(40))
    (tmp_path / "x.bin").write_bytes(b"")
    with pytest.raises(ValueError, match=r"x\.idx: not a fairseq index"):
        wmt.IndexedSentences(tmp_path / "x")
    (tmp_path / "dict.txt").write_text("a 1\nbad\n")
    with pytest.raises(ValueError, match=r"dict\.txt: line 2 is not"):
        wmt.Dictionary(tmp_path / "dict.txt")


def test_batches_by_tokens_as_fairseq(tiny):
    src = wmt.IndexedSentences(tiny / "train.en-de.en")
    tgt = wmt.IndexedSentences(tiny / "train.en-de.de")
    batches = wmt.batch_by_size(src.sizes, tgt.sizes, max_tokens=200)
    assert sorted(i for batch in batches for i in batch) == list(range(len(src)))
    for batch in batches:
        longest = max(max(src.sizes[i], tgt.sizes[i]) for i in batch)
        assert len(batch) * longest <= 200
    # Ordered by target length: each batch's targets are no shorter than the previous one's.
    firsts = [tgt.sizes[batch[0]] for batch in batches]
    assert firsts == sorted(firsts)
    assert wmt.batch_by_size(src.sizes, tgt.sizes, 200, max_sentences=4)[0] == batches[0][:4]
    with pytest.raises(ValueError, match="config max_tokens: 3"):
        wmt.batch_by_size(src.sizes, tgt.sizes, max_tokens=3)
    source, prev, target, ntokens = wmt.TokenBatches(src, tgt, batches)[0]
    assert ntokens == int(target.ne(wmt.PAD).sum())
    assert (prev[:, 0] == wmt.EOS).all() and torch.equal(prev[:, 1:2], target[:, :1])
    assert (source[:, -1] == wmt.EOS).all()  # left-padded


# -- the case's maths ---------------------------------------------------------------------------

def test_label_smoothed_loss_is_fairseqs():
    logits = torch.randn(2, 5, 11)
    target = torch.tensor([[4, 5, 6, 2, 1], [7, 8, 2, 1, 1]])
    eps = 0.1
    lprobs = torch.log_softmax(logits, -1).reshape(-1, 11)
    keep = target.reshape(-1) != wmt.PAD
    nll = -lprobs[keep].gather(1, target.reshape(-1, 1)[keep]).sum()
    smooth = -lprobs[keep].sum()
    # fairseq/criterions/label_smoothed_cross_entropy.py, divided by ntokens
    expected = ((1 - eps) * nll + eps / 11 * smooth) / keep.sum()
    assert training.label_smoothed_loss(logits, target, eps) == pytest.approx(
        float(expected), rel=1e-5)


def test_inverse_sqrt_schedule():
    f = training.inverse_sqrt_factor
    assert [f(n, 4000) for n in (0, 2000, 4000, 16000)] == [0.0, 0.5, 1.0, 0.5]
    assert f(0, 100, 0.1) == pytest.approx(0.1) and f(100, 100, 0.1) == 1.0


def test_bleu_from_summed_statistics_is_sacrebleus_corpus_bleu():
    hypotheses = ["Das Wetter ist heute schön.", "Der Zug hat Verspätung", "die Datei fehlt"]
    references = ["Das Wetter ist heute schön.", "Der Zug nach Berlin hat Verspätung.",
                  "Die Datei fehlt."]
    whole = wmt.bleu_statistics(hypotheses, references)
    parts = [wmt.bleu_statistics(hypotheses[:1], references[:1]),
             wmt.bleu_statistics(hypotheses[1:], references[1:])]
    summed = {k: parts[0][k] + parts[1][k] for k in whole}
    expected = sacrebleu.corpus_bleu(hypotheses, [references], lowercase=True).score
    assert wmt.bleu_score(summed) == pytest.approx(expected) == wmt.bleu_score(whole)
    assert 0 < expected < 100


def test_detokenize_undoes_the_corpus_tokenization():
    splits, _ = wmt14_en_de_text.split_pairs()
    for pairs in splits.values():
        for english, german in pairs:
            for text in (english, german):
                assert wmt.detokenize(" ".join(wmt14_en_de_text.tokenize(text))) == text
    assert wmt.detokenize("user @-@ ID ( s ) &apos;x&apos; .") == "user-ID (s) 'x'."


# -- the tiny corpus ----------------------------------------------------------------------------

def _write_mo(path: Path, entries: dict[bytes, bytes]) -> None:
    """A little-endian GNU MO file of ``entries`` (GNU gettext manual, "MO Files")."""
    keys = sorted(entries)
    ids, strs = b"", b""
    id_table, str_table = [], []
    for key in keys:
        id_table.append((len(key), len(ids)))
        ids += key + b"\x00"
        str_table.append((len(entries[key]), len(strs)))
        strs += entries[key] + b"\x00"
    start = 28 + 16 * len(keys)
    head = struct.pack("<7I", 0x950412DE, 0, len(keys), 28, 28 + 8 * len(keys), 0, 0)
    tables = b"".join(struct.pack("<2I", n, start + o) for n, o in id_table)
    tables += b"".join(struct.pack("<2I", n, start + len(ids) + o) for n, o in str_table)
    path.write_bytes(head + tables + ids + strs)


def test_catalogue_pairs_keep_plain_sentences_only(tmp_path):
    _write_mo(tmp_path / "coreutils.mo", {
        b"": b"Content-Type: text/plain; charset=ISO-8859-1\n",
        b"write error": "Schreibfehler".encode("latin-1"),
        b"invalid option": "ung\u00fcltige Option".encode("latin-1"),
        b"cannot stat %s": b"stat f\xfcr %s nicht m\xf6glich",          # a directive
        b"file\x00files": b"Datei\x00Dateien",                              # plural
        b"menu\x04Open file": b"Datei \xf6ffnen",                           # context
        b"use --force option": b"Option --force verwenden",                # an option
        b"Eric Blake": b"Eric Blake",                                       # not translated
    })
    _write_mo(tmp_path / "grep.mo", {b"": b"charset=UTF-8\n",
                                     b"Write error": "Fehler".encode("utf-8")})
    (tmp_path / "tar.mo").write_bytes(b"not a catalogue at all")
    pairs, read = wmt14_en_de_text.catalogue_pairs(tmp_path)
    assert read == 2  # coreutils and grep; tar is unreadable, the rest absent
    assert pairs == [("invalid option", "ung\u00fcltige Option"),
                     ("write error", "Schreibfehler")]  # "Write error" is a duplicate


def test_tiny_corpus_holds_the_catalogues_and_the_hand_written_pairs():
    splits, read = wmt14_en_de_text.split_pairs()
    assert splits["train"][0] == ("The weather is fine today.", "Das Wetter ist heute schön.")
    total = sum(len(pairs) for pairs in splits.values())
    if read == 0:  # an image without /usr/share/locale: the hand-written pairs alone
        assert total == 30
    else:
        assert total > 30 and len(splits["test"]) > 3
        train = {english for english, _ in splits["train"]}
        assert not train & {english for english, _ in splits["test"]}


def test_checker_wants_the_raw_test_references(tiny, tmp_path):
    import shutil

    root = Path(shutil.copytree(tiny, tmp_path / "wmt"))
    raw = root / "test.raw.de"
    raw.write_text("".join(raw.read_text(encoding="utf-8").splitlines(True)[:-1]),
                   encoding="utf-8")
    lines = len(raw.read_text(encoding="utf-8").splitlines())
    assert datasets.check("wmt14_en_de_fairseq", root) == [
        f"test.raw.de has {lines} lines, the test set {lines + 1} sentences"]
    raw.unlink()
    assert datasets.check("wmt14_en_de_fairseq", root) == ["test.raw.de: missing file"]


def test_cpu_profile_is_declared_and_reduced():
    config = profile_config("cpu")
    profile = yaml.safe_load((CASE_DIR / "config" / "cpu.yaml").read_text())["profile"]
    assert {"layers", "hidden size", "data set"} <= set(profile["reduced"])
    assert config["encoder_layers"] < 6 and config["encoder_embed_dim"] < 1024
    assert config["target_bleu"] > 0 and config["precision"] == "fp32"
    assert np.isfinite(config["learning_rate"])
