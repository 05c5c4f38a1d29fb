"""The data-set registry: every format's tiny data passes its checker and reads back with the real
readers (pycocotools, h5py, soundfile, fairseq's index layout); each checker catches real
breakage; the CLI lists what the registry holds; the host's data check
(``python3 -m flagperf_host.data_check``) runs from the host archive on a bare python3."""

from __future__ import annotations

import contextlib
import filecmp
import io
import json
import shutil
import struct
import subprocess
import wave
from pathlib import Path

import h5py
import numpy as np
import pytest
import soundfile

import host_side
from flagperf_ansible import cli, datasets
from flagperf_ansible.datasets.registry import Format
from flagperf_ansible.datasets.wmt14_en_de_fairseq import SPECIALS, write_binarized
from flagperf_ansible.datasets.wmt14_en_de_text import split_pairs
from flagperf_host import data_check
from flagperf_host.checks.mlperf_bert_hdf5 import BERT_DATASETS, bert_shard_problems
from flagperf_host.readers.flac import flac_streaminfo
from flagperf_host.readers.hdf5 import Hdf5NotCovered, hdf5_datasets

BUILT_IN = sorted(data_check.CHECKERS)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each built-in format's tiny data, written once (tests that break data copy it first)."""
    root = tmp_path_factory.mktemp("datasets")
    for name in BUILT_IN:
        datasets.prepare(name, root / name)
    return {name: root / name for name in BUILT_IN}


@pytest.fixture
def copy(pristine: dict[str, Path], tmp_path: Path):
    """A writable copy of a format's tiny data."""
    def make(name: str) -> Path:
        return Path(shutil.copytree(pristine[name], tmp_path / name))
    return make


def _same_tree(a: Path, b: Path) -> list[str]:
    """Files that differ between two trees (missing on one side, or other bytes)."""
    names = {p.relative_to(a) for p in a.rglob("*") if p.is_file()}
    names |= {p.relative_to(b) for p in b.rglob("*") if p.is_file()}
    return sorted(str(n) for n in names if not ((a / n).is_file() and (b / n).is_file()
                                                and filecmp.cmp(a / n, b / n, shallow=False)))


# --- every format ------------------------------------------------------------------------------

def test_every_built_in_format_has_a_host_checker():
    assert sorted(f.name for f in datasets.formats()) == BUILT_IN
    assert len(BUILT_IN) == 12


@pytest.mark.parametrize("name", BUILT_IN)
def test_generated_data_passes_its_checker(pristine, name):
    assert datasets.check(name, pristine[name]) == []
    assert any(p.is_file() for p in pristine[name].rglob("*"))


@pytest.mark.parametrize("name", BUILT_IN)
def test_generators_are_deterministic(pristine, tmp_path, name):
    datasets.prepare(name, tmp_path / name)
    assert _same_tree(pristine[name], tmp_path / name) == []


def test_a_folder_that_is_not_there():
    assert datasets.check("coco2017", "/no/such/folder") == ["/no/such/folder: not a folder"]


# --- imagenet ----------------------------------------------------------------------------------

def test_digits_is_the_imagenet_generator(pristine):
    assert datasets.get("digits") is datasets.get("imagenet")
    assert "digits" in datasets.names()
    counts = {s: sum(1 for _ in (pristine["imagenet"] / s).rglob("*.png"))
              for s in ("train", "val")}
    assert counts == {"train": 1437, "val": 360}


def test_imagenet_checker_catches_breakage(copy):
    root = copy("imagenet")
    shutil.rmtree(root / "val" / "3")
    for image in (root / "train" / "0").iterdir():
        image.write_bytes(b"<html>not an image</html>")
    problems = datasets.check("imagenet", root)
    assert ("train/ and val/ have different class folders (only in train: 3; only in val: none)"
            in problems)
    assert any(p.startswith("train/: not image files: train/0/") for p in problems), problems


def test_imagenet_checker_names_loose_validation_images(copy):
    root = copy("imagenet")
    for image in list((root / "val").rglob("*.png")):
        image.rename(root / "val" / image.name)
    for folder in [p for p in (root / "val").iterdir() if p.is_dir()]:
        folder.rmdir()
    assert datasets.check("imagenet", root) == [
        "val/: no class folders (360 images lie loose: move them into <wnid>/ folders)"]


def test_synthetic_imagenet_has_imagenet_s_layout_and_shape(tmp_path):
    from PIL import Image

    from flagperf_ansible.datasets.imagenet import write_synthetic

    root = tmp_path / "synthetic"
    assert write_synthetic(root, train=1200, val=30, classes=20, size=64, workers=2) == {
        "train": 1200, "val": 30}
    assert datasets.check("imagenet", root) == []
    assert sorted(p.name for p in (root / "train").iterdir() if p.is_dir())[:2] == [
        "n00000000", "n00000001"]
    assert len(list((root / "train" / "n00000019").glob("n00000019_*.JPEG"))) == 60
    first = root / "val" / "n00000001" / "ILSVRC2012_val_00000001.JPEG"
    with Image.open(first) as image:
        assert (image.format, image.mode, image.size) == ("JPEG", "RGB", (64, 64))
    # Deterministic, and a split written with the same parameters is left alone.
    again = tmp_path / "again"
    write_synthetic(again, train=1200, val=30, classes=20, size=64, workers=1)
    assert filecmp.cmp(first, again / "val/n00000001/ILSVRC2012_val_00000001.JPEG",
                       shallow=False)
    before = first.stat().st_mtime_ns
    write_synthetic(root, train=1200, val=30, classes=20, size=64)
    assert first.stat().st_mtime_ns == before
    with pytest.raises(ValueError, match="must each be at least the 20 classes"):
        write_synthetic(tmp_path / "few", train=1200, val=10, classes=20)


# --- coco2017 ----------------------------------------------------------------------------------

# pycocotools 2.0.11 calls np.array(copy=False) on its RLE objects: numpy 2 warns.
@pytest.mark.filterwarnings("ignore:__array__ implementation:DeprecationWarning")
def test_coco_reads_back_with_pycocotools(pristine):
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    root = pristine["coco2017"]
    for split, images in (("train2017", 4), ("val2017", 1)):
        with contextlib.redirect_stdout(io.StringIO()):
            truth = COCO(str(root / "annotations" / f"instances_{split}.json"))
        annotations = truth.loadAnns(truth.getAnnIds())
        assert len(truth.getImgIds()) == images and len(annotations) >= 12 * images
        for image in truth.loadImgs(truth.getImgIds()):
            assert (root / split / image["file_name"]).is_file()
        # The polygons rasterise back to the masks they came from (area = mask pixels).
        ratios = [truth.annToMask(a).sum() / a["area"] for a in annotations]
        assert 0.95 < min(ratios) and max(ratios) < 1.05
        # The ground truth as detections scores AP 1.0, boxes and masks: COCOeval reads it all.
        detections = [{**{k: a[k] for k in ("image_id", "category_id", "bbox", "segmentation")},
                       "score": 1.0} for a in annotations]
        for kind in ("bbox", "segm"):
            with contextlib.redirect_stdout(io.StringIO()):
                evaluation = COCOeval(truth, truth.loadRes(detections), kind)
                evaluation.evaluate()
                evaluation.accumulate()
                evaluation.summarize()
            assert evaluation.stats[0] == pytest.approx(1.0)


def test_coco_checker_catches_breakage(copy):
    root = copy("coco2017")
    first = json.loads((root / "annotations/instances_val2017.json").read_text())["images"][0]
    (root / "val2017" / first["file_name"]).unlink()
    (root / "annotations/instances_train2017.json").write_text("<html>404</html>")
    (root / "train2017/000000000001.jpg").write_bytes(b"\x89PNG\r\n\x1a\n" + b"0" * 64)
    assert datasets.check("coco2017", root) == [
        "train2017/: not JPEG files: 000000000001.jpg",
        "annotations/instances_train2017.json: not a JSON object (starts with '<html>404</html>')",
        "val2017/: no .jpg images",           # its one image gone
        f"annotations/instances_val2017.json: first image {first['file_name']} is not in val2017/"]


# --- ljspeech ----------------------------------------------------------------------------------

def test_ljspeech_clips_are_ljspeech_like(pristine):
    root = pristine["ljspeech"]
    lines = (root / "metadata.csv").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 19 and lines[0].startswith("LJ001-0001|Beautiful is better than ugly.|")
    for line in lines:
        with wave.open(str(root / "wavs" / (line.split("|")[0] + ".wav"))) as clip:
            assert (clip.getframerate(), clip.getnchannels(), clip.getsampwidth()) == (22050, 1, 2)
            samples = np.frombuffer(clip.readframes(clip.getnframes()), "<i2")
        assert 1.0 < len(samples) / 22050 < 10.0                         # LJSpeech: 1-10 s
        assert np.abs(samples[:1000]).max() < 100 < np.abs(samples).max()  # silence, then sound


def test_ljspeech_checker_catches_breakage(copy):
    root = copy("ljspeech")
    (root / "wavs" / "LJ001-0005.wav").unlink()
    with wave.open(str(root / "wavs" / "LJ001-0001.wav"), "wb") as clip:
        clip.setparams((1, 2, 16000, 1600, "NONE", "not compressed"))
        clip.writeframes(b"\x00\x00" * 1600)
    with (root / "metadata.csv").open("a", encoding="utf-8") as metadata:
        metadata.write("LJ001-0020 no separators here\n")
    assert datasets.check("ljspeech", root) == [
        "metadata.csv: 1 line(s) are not id|text|normalized text: line 20",
        "wavs/: 1 clip(s) of metadata.csv have no wav: LJ001-0005",
        "wavs/: not 22050 Hz mono 16-bit PCM: LJ001-0001.wav (16000 Hz, 1 channel(s), 16-bit)"]


# --- librispeech -------------------------------------------------------------------------------

def test_librispeech_flac_headers_agree_with_libsndfile(pristine):
    flacs = sorted(pristine["librispeech"].rglob("*.flac"))
    assert len(flacs) == 12
    for path in flacs:
        info = soundfile.info(str(path))
        assert (info.format, info.subtype) == ("FLAC", "PCM_16")
        assert flac_streaminfo(str(path)) == (16000, 1, 16, info.frames)
    transcript = (pristine["librispeech"] / "dev-clean/2001/201/2001-201.trans.txt").read_text()
    assert transcript.splitlines()[0].startswith("2001-201-0000 ")
    assert transcript == transcript.upper()


def test_librispeech_checker_catches_breakage(copy):
    root = copy("librispeech")
    (root / "train-clean-100/1001/101/1001-101-0002.flac").unlink()
    (root / "test-clean/3001/301/3001-301.trans.txt").unlink()
    audio, _ = soundfile.read(str(root / "dev-clean/2001/201/2001-201-0000.flac"), dtype="int16")
    soundfile.write(str(root / "dev-clean/2001/201/2001-201-0000.flac"), audio, 22050,
                    format="FLAC", subtype="PCM_16")
    assert datasets.check("librispeech", root) == [
        "train-clean-100/: utterances without a transcript line or a flac: "
        "1001-101-0002 (no .flac)",
        "dev-clean/: not 16000 Hz mono 16-bit FLAC: "
        "2001-201-0000.flac (22050 Hz, 1 channel(s), 16-bit)",
        "test-clean/: missing transcripts: 3001/301/3001-301.trans.txt"]
    for split in ("train-clean-100", "dev-clean", "test-clean"):
        shutil.rmtree(root / split)
    assert datasets.check("librispeech", root)[0].startswith("no split folder (train-clean-100, ")


# --- mlperf_bert_hdf5 --------------------------------------------------------------------------

def test_bert_shards_read_as_flagperf_reads_them(pristine):
    shards = sorted((pristine["mlperf_bert_hdf5"] / "2048_shards_uncompressed").glob("part*"))
    assert [p.name for p in shards] == ["part_00000_of_00002.hdf5", "part_00001_of_00002.hdf5"]
    with h5py.File(shards[0], "r") as shard:
        arrays = {key: np.asarray(shard[key][:]) for key in BERT_DATASETS}
    # BERT's phase-1 shape: 128 tokens, 20 predictions (MLPerf's real shards: 512, 76).
    assert arrays["input_ids"].shape == (512, 128) and arrays["masked_lm_ids"].shape == (512, 20)
    for row in range(512):
        length = int(arrays["input_mask"][row].sum())
        ids = arrays["input_ids"][row]
        assert ids[0] == 101 and ids[length - 1] == 102
        assert not ids[length:].any() and arrays["input_mask"][row, :length].all()
        count = int(np.count_nonzero(arrays["masked_lm_positions"][row]))
        # create_pretraining_data: round(len(tokens) * masked_lm_prob), [CLS] and [SEP] counted
        assert count == min(20, max(1, round(0.15 * length)))
        positions = arrays["masked_lm_positions"][row, :count]
        assert (positions < length).all() and (np.diff(positions) > 0).all()
        assert (arrays["masked_lm_ids"][row, :count] >= 1996).all()


def test_hdf5_index_reader_agrees_with_h5py(tmp_path):
    arrays = {"input_ids": np.zeros((3, 8), "i4"), "scores": np.zeros((5,), "f4"),
              "grid": np.zeros((2, 3, 4), "i1")}
    for number, options in enumerate(({}, {"libver": "latest"}, {"userblock_size": 512},
                                      {"libver": "latest", "compression": "gzip"})):
        path = tmp_path / f"{number}.hdf5"
        compression = options.pop("compression", None)
        with h5py.File(path, "w", **options) as out:
            for name, array in arrays.items():
                out.create_dataset(name, data=array, compression=compression)
            out.create_group("not_a_dataset")
        assert hdf5_datasets(str(path)) == {
            "grid": ((2, 3, 4), "integer"), "input_ids": ((3, 8), "integer"),
            "scores": ((5,), "float")}, options
    dense = tmp_path / "dense.hdf5"
    with h5py.File(dense, "w", libver="latest") as out:  # more than 8 links: a fractal heap
        for number in range(9):
            out.create_dataset(f"d{number}", data=np.zeros(2))
    with pytest.raises(Hdf5NotCovered):
        hdf5_datasets(str(dense))
    assert bert_shard_problems(str(dense)) == []  # not covered: not blocked


def test_bert_checker_catches_breakage(copy):
    root = copy("mlperf_bert_hdf5")
    train = root / "2048_shards_uncompressed"
    with h5py.File(train / "part_00000_of_00002.hdf5", "a") as shard:
        del shard["next_sentence_labels"]
    with h5py.File(train / "part_00001_of_00002.hdf5", "a") as shard:
        labels = shard["next_sentence_labels"][:]
        del shard["next_sentence_labels"]
        shard.create_dataset("next_sentence_labels", data=labels[:10])
    (root / "eval_set_uncompressed/part_eval_10k.hdf5").write_bytes(b"not hdf5" * 100)
    assert datasets.check("mlperf_bert_hdf5", root) == [
        "2048_shards_uncompressed/part_00000_of_00002.hdf5: no dataset next_sentence_labels",
        "2048_shards_uncompressed/part_00001_of_00002.hdf5: sample counts differ (input_ids 512, "
        "input_mask 512, segment_ids 512, masked_lm_positions 512, masked_lm_ids 512, "
        "next_sentence_labels 10)",
        "eval_set_uncompressed/part_eval_10k.hdf5: not an HDF5 file (no signature)"]


# --- wmt14 -------------------------------------------------------------------------------------

def test_wmt14_text_is_line_aligned(pristine):
    root = pristine["wmt14_en_de_text"]
    splits, _ = split_pairs()  # the 30 hand-written pairs and the gettext catalogues' here
    for split, least in (("train", 24), ("valid", 3), ("test", 3)):
        en = (root / f"{split}.en").read_text(encoding="utf-8").splitlines()
        de = (root / f"{split}.de").read_text(encoding="utf-8").splitlines()
        assert len(en) == len(de) == len(splits[split]) >= least
    first = (root / "train.de").read_text(encoding="utf-8").splitlines()[0]
    assert first == "Das Wetter ist heute schön ."


def test_wmt14_text_checker_catches_breakage(copy):
    root = copy("wmt14_en_de_text")
    (root / "valid.de").write_text("".join((root / "valid.de").read_text().splitlines(True)[:-1]))
    (root / "test.en").write_bytes("Caf\u00e9 au lait .\n".encode("latin-1"))
    (root / "train.en").unlink()
    valid = len(split_pairs()[0]["valid"])
    assert datasets.check("wmt14_en_de_text", root) == [
        "train.en: missing file",
        f"valid.en has {valid} lines, valid.de {valid - 1}: not line-aligned",
        "test.en: not UTF-8 (byte 3)"]


def _read_fairseq(stem: Path) -> list[list[int]]:
    """Sentences of token ids, read as fairseq's IndexedDataset (``TNTIDX``, ids stored + 1)
    and MMapIndexedDataset (``MMIDIDX``) read them (fairseq/data/indexed_dataset.py)."""
    index = stem.with_name(stem.name + ".idx").read_bytes()
    tokens = stem.with_name(stem.name + ".bin").read_bytes()
    if index[:8] == b"TNTIDX\x00\x00":
        _, code, element, count, dims = struct.unpack("<QQQQQ", index[8:48])
        assert (code, element, dims) == (4, 4, count)
        offsets = np.frombuffer(index, "<i8", count + 1, 48 + 8 * (count + 1))
        ids = np.frombuffer(tokens, "<i4") - 1
        return [ids[offsets[i]:offsets[i + 1]].tolist() for i in range(count)]
    _, code, count = struct.unpack("<QBQ", index[9:26])
    assert code == 8  # uint16
    sizes = np.frombuffer(index, "<i4", count, 26)
    pointers = np.frombuffer(index, "<i8", count, 26 + 4 * count)
    return [np.frombuffer(tokens, "<u2", int(sizes[i]), int(pointers[i])).tolist()
            for i in range(count)]


@pytest.mark.parametrize("impl", ["cached", "mmap"])
def test_wmt14_binarized_decodes_to_the_text(pristine, tmp_path, impl):
    root = pristine["wmt14_en_de_fairseq"] if impl == "cached" else tmp_path
    if impl == "mmap":
        write_binarized(root, impl="mmap")
        assert datasets.check("wmt14_en_de_fairseq", root) == []
    lines = (root / "dict.en.txt").read_text(encoding="utf-8").splitlines()
    assert lines == (root / "dict.de.txt").read_text(encoding="utf-8").splitlines()  # joined
    assert (len(SPECIALS) + len(lines)) % 8 == 0
    symbols = [*SPECIALS, *(line.split(" ")[0] for line in lines)]
    unknown = 0
    for split in ("train", "valid", "test"):
        for lang in ("en", "de"):
            text = (pristine["wmt14_en_de_text"] / f"{split}.{lang}").read_text(encoding="utf-8")
            decoded = [" ".join(symbols[i] for i in ids)
                       for ids in _read_fairseq(root / f"{split}.en-de.{lang}")]
            # Words the training text does not have are <unk>, as fairseq's preprocess maps them.
            expected = [" ".join(t if t in symbols else "<unk>" for t in line.split()) + " </s>"
                        for line in text.splitlines()]
            assert decoded == expected, (split, lang)
            unknown += sum(line.split().count("<unk>") for line in decoded)
            assert split != "train" or "<unk>" not in " ".join(decoded)
    assert unknown > 0


def test_wmt14_binarized_checker_catches_breakage(copy):
    root = copy("wmt14_en_de_fairseq")
    train_bin = root / "train.en-de.de.bin"
    train_bin.write_bytes(train_bin.read_bytes()[:-4])
    valid_idx = root / "valid.en-de.en.idx"
    valid_idx.write_bytes(b"NOTANIDX" + valid_idx.read_bytes()[8:])
    (root / "test.en-de.de.idx").unlink()
    (root / "dict.de.txt").write_text("two words 3\n" + (root / "dict.de.txt").read_text())
    # Only a dictionary's first 100 lines are read: a bad line after them passes.
    (root / "dict.en.txt").write_text("".join(f"w{n} {n}\n" for n in range(100)) + "bad\n")
    assert datasets.check("wmt14_en_de_fairseq", root) == [
        "dict.de.txt: lines that are not '<token> <count>': 1",
        f"train.en-de.de.idx: train.en-de.de.bin is {train_bin.stat().st_size} bytes, the index "
        f"says {train_bin.stat().st_size + 4}",
        "valid.en-de.en.idx: not a fairseq index (starts with b'NOTANIDX')",
        "test.en-de.de.idx: missing file"]


# --- registry and CLI --------------------------------------------------------------------------

def _fake_generate(target: Path) -> dict[str, int]:
    (target / "fake.txt").write_text("fake\n")
    return {"files": 1}


def _fake_check(root: Path) -> list[str]:
    return [] if (root / "fake.txt").is_file() else ["fake.txt: missing file"]


@pytest.fixture
def fake_format():
    registered = datasets.register(Format("zz_fake", "a format registered by a test",
                                          _fake_check, _fake_generate, aliases=("zz_alias",)))
    yield registered
    datasets.unregister("zz_fake")


def test_cli_lists_what_the_registry_holds(fake_format, tmp_path, capsys):
    assert cli.main(["data", "list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in listed] == [f.name for f in datasets.formats()]
    assert "zz_fake" in [line.split()[0] for line in listed]
    assert any(line.endswith("a format registered by a test (also: zz_alias)") for line in listed)
    assert cli.main(["data", "check", "zz_fake", str(tmp_path)]) == 1
    assert capsys.readouterr().out == "fake.txt: missing file\n"
    assert cli.main(["data", "prepare", "zz_alias", str(tmp_path / "made")]) == 0
    assert cli.main(["data", "check", "zz_fake", str(tmp_path / "made")]) == 0


def test_registry_refuses_a_taken_name(fake_format):
    with pytest.raises(ValueError, match="taken by 'imagenet'"):
        datasets.register(Format("zz_other", "x", _fake_check, _fake_generate, aliases=("digits",)))
    with pytest.raises(datasets.UnknownFormat, match=r"unknown data format 'nope' \(known: bert_eval_text, coco"):
        datasets.get("nope")


def test_cli_prepare_and_check(tmp_path, capsys):
    assert cli.main(["data", "prepare", "wmt14_en_de_text", str(tmp_path / "wmt")]) == 0
    assert "wmt14_en_de_text: " in capsys.readouterr().out
    assert cli.main(["data", "check", "wmt14_en_de_text", str(tmp_path / "wmt")]) == 0
    assert capsys.readouterr().out.endswith("/wmt: ok\n")
    (tmp_path / "wmt" / "test.de").unlink()
    assert cli.main(["data", "check", "wmt14_en_de_text", str(tmp_path / "wmt")]) == 1
    captured = capsys.readouterr()
    assert captured.out == "test.de: missing file\n"
    assert captured.err.endswith(": 1 problem(s)\n")
    with pytest.raises(SystemExit) as exited:
        cli.main(["data", "check", "nope", str(tmp_path)])
    assert exited.value.code == 2


# --- the data check on a host ------------------------------------------------------------------

def _run_on_bare_python(*argv: str) -> subprocess.CompletedProcess:
    """``python3 -m flagperf_host.data_check ARGV`` from the host archive, as preflight runs it,
    in a python3 without site packages (``-S``: no numpy, no h5py), the archive alone on its
    path."""
    python, *rest = host_side.command("data_check", *argv)
    return subprocess.run([python, "-S", *rest], env=host_side.env(), capture_output=True,
                          text=True, timeout=60, check=False, cwd="/")


def test_host_script_checks_every_format_on_a_bare_python(pristine, copy):
    requests = [{"format": name, "path": str(pristine[name]), "case_id": f"case-{name}"}
                for name in BUILT_IN]
    done = _run_on_bare_python(json.dumps(requests))
    assert (done.returncode, done.stderr) == (0, "")
    assert json.loads(done.stdout) == {"results": [{**r, "problems": []} for r in requests]}

    broken = copy("ljspeech")
    (broken / "metadata.csv").unlink()
    requests.append({"format": "ljspeech", "path": str(broken)})
    done = _run_on_bare_python(json.dumps(requests))
    assert done.returncode == 1
    assert [r["problems"] for r in json.loads(done.stdout)["results"]][-2:] == [
        [], ["metadata.csv: missing file"]]

    done = _run_on_bare_python("ljspeech", str(broken))
    assert (done.returncode, done.stdout) == (1, "metadata.csv: missing file\n")


def test_host_script_refuses_bad_arguments():
    done = _run_on_bare_python(json.dumps([{"format": "nope", "path": "/"}]))
    assert done.returncode == 2 and "unknown data format nope" in json.loads(done.stdout)["error"]
    done = _run_on_bare_python("only-one-word")
    assert done.returncode == 2 and "usage: data_check FORMAT PATH" in done.stderr
    done = _run_on_bare_python("[{nope")
    assert done.returncode == 2 and "not JSON" in json.loads(done.stdout)["error"]
