"""Offline data loaders and batching, checked on files written here in the published formats."""
import collections
import gzip
import json
import math
import os
import socket
import struct

import numpy as np
import pytest

from tostnp.backend import RNG
from tostnp.data import (CharTokenizer, iterate_minibatches, load_cifar10, load_digits_split,
                         load_mnist, load_text, sample_lm_batch, train_val_split,
                         unigram_bits_per_char)


@pytest.fixture
def no_network(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("tried to use the network")
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


# --- digits ---------------------------------------------------------------------------------
def test_digits_split_shapes_deterministic_stratified(no_network):
    from sklearn.datasets import load_digits
    d = load_digits()
    Xtr, ytr, Xte, yte = load_digits_split(seed=0, test_fraction=0.25)
    assert Xtr.shape == (ytr.shape[0], 8, 8, 1) and Xte.shape == (yte.shape[0], 8, 8, 1)
    assert Xtr.dtype == np.float32 and ytr.dtype == np.int64 and yte.dtype == np.int64
    assert 0.0 <= Xtr.min() and Xtr.max() <= 1.0 and Xte.max() == 1.0
    assert len(ytr) + len(yte) == len(d.target) == 1797
    full = collections.Counter(d.target.tolist())
    test = collections.Counter(yte.tolist())
    for c, n_c in full.items():  # stratified: each class split in the same proportion
        assert test[c] == round(0.25 * n_c), c
    assert collections.Counter(ytr.tolist()) + test == full
    # train + test is a partition of the images: the multiset of rows matches the original
    rows = lambda P: sorted(map(bytes, P.reshape(len(P), 64).round().astype(np.uint8)))
    assert rows(np.concatenate([Xtr, Xte]) * 16) == rows(d.data)  # pixels are 0..16
    again = load_digits_split(seed=0, test_fraction=0.25)
    for a, b in zip((Xtr, ytr, Xte, yte), again):
        np.testing.assert_array_equal(a, b)
    other = load_digits_split(seed=1, test_fraction=0.25)
    assert not np.array_equal(other[2], Xte)
    with pytest.raises(ValueError, match="test_fraction"):
        load_digits_split(test_fraction=1.5)


def test_digits_read_without_importing_sklearn_equal_its_loader(monkeypatch):
    """The table read from scikit-learn's file, in a process that never imports scikit-learn,
    equals ``sklearn.datasets.load_digits`` (imported here, the reference); without the file,
    ``load_digits`` itself is the fallback."""
    import subprocess
    import sys
    from sklearn.datasets import load_digits
    from tostnp.data import images
    d = load_digits()
    pixels, labels = images._digits_table()
    np.testing.assert_array_equal(pixels, d.data)
    np.testing.assert_array_equal(labels, d.target)
    assert labels.dtype == np.int64
    code = ("import sys; from tostnp.data import load_digits_split; load_digits_split(); "
            "print(any(m == 'sklearn' or m.startswith('sklearn.') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=os.path.dirname(os.path.dirname(__file__)))
    assert out.stdout.strip() == "False"
    monkeypatch.setattr(images, "_DIGITS_MAX_BYTES", 100)          # "too large": fallback
    pixels2, labels2 = images._digits_table()
    np.testing.assert_array_equal(pixels2, d.data)
    np.testing.assert_array_equal(labels2, d.target)


# --- MNIST ----------------------------------------------------------------------------------
def _idx_bytes(arr: np.ndarray, magic: int) -> bytes:
    header = struct.pack(">I", magic) + b"".join(struct.pack(">I", s) for s in arr.shape)
    return header + arr.astype(np.uint8).tobytes()


def _write_mnist(d, r, n_train=6, n_test=4, gz_test=True):
    data = {}
    for split, n in (("train", n_train), ("t10k", n_test)):
        img = r.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        lab = r.integers(0, 10, size=n, dtype=np.uint8)
        data[split] = (img, lab)
        for kind, arr, magic, suffix in (("images", img, 0x00000803, "idx3-ubyte"),
                                         ("labels", lab, 0x00000801, "idx1-ubyte")):
            raw = _idx_bytes(arr, magic)
            name = os.path.join(d, f"{split}-{kind}-{suffix}")
            if split == "t10k" and gz_test:
                with gzip.open(name + ".gz", "wb") as f:
                    f.write(raw)
            else:
                with open(name, "wb") as f:
                    f.write(raw)
    return data


def test_mnist_reads_idx_and_gz(tmp_path):
    data = _write_mnist(str(tmp_path), np.random.default_rng(0))
    Xtr, ytr, Xte, yte = load_mnist(str(tmp_path))
    assert Xtr.shape == (6, 28, 28, 1) and Xte.shape == (4, 28, 28, 1)
    assert Xtr.dtype == np.float32 and ytr.dtype == np.int64
    for (X, y), split in (((Xtr, ytr), "train"), ((Xte, yte), "t10k")):
        img, lab = data[split]
        for i in range(len(lab)):  # pixel by pixel against the bytes written
            assert y[i] == int(lab[i])
            for r_, c_ in ((0, 0), (13, 27), (27, 5)):
                assert X[i, r_, c_, 0] == np.float32(int(img[i, r_, c_]) / 255.0)
        np.testing.assert_allclose(X[..., 0], img / 255.0, rtol=1e-7)


def test_mnist_clear_errors(tmp_path):
    d = str(tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_mnist(os.path.join(d, "nope"))
    _write_mnist(d, np.random.default_rng(1), gz_test=False)
    p = os.path.join(d, "train-images-idx3-ubyte")
    raw = open(p, "rb").read()
    open(p, "wb").write(raw[:-100])  # truncated data
    with pytest.raises(ValueError, match="truncated"):
        load_mnist(d)
    open(p, "wb").write(raw[:10])  # truncated header
    with pytest.raises(ValueError, match="truncated"):
        load_mnist(d)
    open(p, "wb").write(struct.pack(">I", 0x00000801) + raw[4:])  # a labels magic
    with pytest.raises(ValueError, match="magic"):
        load_mnist(d)
    open(p, "wb").write(raw)
    lab = os.path.join(d, "train-labels-idx1-ubyte")
    open(lab, "wb").write(_idx_bytes(np.zeros(5, np.uint8), 0x00000801))  # 5 labels, 6 images
    with pytest.raises(ValueError, match="6 images but"):
        load_mnist(d)
    os.remove(lab)
    with pytest.raises(FileNotFoundError, match="train-labels"):
        load_mnist(d)


def test_mnist_truncated_gzip(tmp_path):
    d = str(tmp_path)
    _write_mnist(d, np.random.default_rng(2), gz_test=True)
    p = os.path.join(d, "t10k-images-idx3-ubyte.gz")
    raw = open(p, "rb").read()
    open(p, "wb").write(raw[: len(raw) // 2])
    with pytest.raises(ValueError, match="t10k-images"):
        load_mnist(d)


# --- CIFAR-10 -------------------------------------------------------------------------------
def _write_cifar(d, r, n=3):
    os.makedirs(d, exist_ok=True)
    recs = {}
    for name in [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]:
        rec = r.integers(0, 256, size=(n, 3073), dtype=np.uint8)
        rec[:, 0] = r.integers(0, 10, size=n)
        recs[name] = rec
        with open(os.path.join(d, name), "wb") as f:
            f.write(rec.tobytes())
    return recs


def test_cifar10_reads_binary_records(tmp_path):
    d = os.path.join(str(tmp_path), "cifar-10-batches-bin")
    recs = _write_cifar(d, np.random.default_rng(3))
    Xtr, ytr, Xte, yte = load_cifar10(str(tmp_path))  # the parent directory also works
    assert Xtr.shape == (15, 32, 32, 3) and Xte.shape == (3, 32, 32, 3)
    assert Xtr.dtype == np.float32 and ytr.dtype == np.int64
    train_recs = np.concatenate([recs[f"data_batch_{i}.bin"] for i in range(1, 6)])
    for X, y, rec in ((Xtr, ytr, train_recs), (Xte, yte, recs["test_batch.bin"])):
        for i in range(len(rec)):
            assert y[i] == rec[i, 0]
            for (row, col, ch) in ((0, 0, 0), (5, 17, 1), (31, 31, 2), (10, 3, 2)):
                # record layout: label, then the red plane, green plane, blue plane (row-major)
                byte = rec[i, 1 + ch * 1024 + row * 32 + col]
                assert X[i, row, col, ch] == np.float32(int(byte) / 255.0)
    np.testing.assert_array_equal(load_cifar10(d)[3], yte)


def test_cifar10_clear_errors(tmp_path):
    d = str(tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_cifar10(os.path.join(d, "nope"))
    _write_cifar(d, np.random.default_rng(4))
    p = os.path.join(d, "data_batch_3.bin")
    raw = open(p, "rb").read()
    open(p, "wb").write(raw[:-7])
    with pytest.raises(ValueError, match="data_batch_3.bin.*truncated"):
        load_cifar10(d)
    open(p, "wb").write(raw)
    os.remove(os.path.join(d, "test_batch.bin"))
    with pytest.raises(FileNotFoundError, match="test_batch.bin"):
        load_cifar10(d)


# --- text -----------------------------------------------------------------------------------
def test_default_corpus_offline_and_deterministic(no_network):
    text = load_text()
    assert isinstance(text, str) and len(text) > 100_000
    from pydoc_data.topics import topics
    assert text.startswith(topics[sorted(topics)[0]])
    assert load_text() == text


def test_load_text_from_file(tmp_path):
    p = tmp_path / "t.txt"
    p.write_bytes("héllo wörld\n∑".encode("utf-8"))
    assert load_text(str(p)) == "héllo wörld\n∑"
    p.write_bytes(b"\xff\xfe bad")
    with pytest.raises(ValueError, match="UTF-8"):
        load_text(str(p))
    with pytest.raises(FileNotFoundError):
        load_text(str(tmp_path / "missing.txt"))


def test_char_tokenizer_round_trip():
    text = load_text()
    tok = CharTokenizer(text)
    assert tok.chars == "".join(sorted(set(text)))
    assert tok.vocab_size == len(set(text))
    sample = text[:5000] + "héllo"[:1]
    ids = tok.encode(sample)
    assert ids.dtype == np.int64 and ids.shape == (len(sample),)
    vocab = sorted(set(text))
    ref = [vocab.index(c) for c in sample[:300]]  # plain reference
    assert ids[:300].tolist() == ref
    assert tok.decode(ids) == sample
    assert tok.decode(ids.tolist()) == sample
    tok2 = CharTokenizer.from_dict(json.loads(json.dumps(tok.to_dict())))
    np.testing.assert_array_equal(tok2.encode(sample), ids)
    small = CharTokenizer("ba∑")
    assert small.decode(small.encode("∑ab")) == "∑ab"
    with pytest.raises(ValueError, match="'z'"):
        small.encode("abz")
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        small.decode([0, 3])
    with pytest.raises(ValueError, match="sorted"):
        CharTokenizer.from_dict({"type": "char", "chars": "ba"})
    with pytest.raises(TypeError):
        CharTokenizer("")


def test_train_val_split():
    ids = np.arange(1000)
    tr, va = train_val_split(ids)
    np.testing.assert_array_equal(tr, np.arange(900))
    np.testing.assert_array_equal(va, np.arange(900, 1000))
    tr, va = train_val_split(ids, val_fraction=0.25)
    assert len(va) == 250 and va[0] == 750
    with pytest.raises(ValueError, match="shape"):
        train_val_split(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="too short"):
        train_val_split(np.arange(3))


# --- batching -------------------------------------------------------------------------------
def test_iterate_minibatches_epoch_and_determinism():
    X = np.arange(23 * 2, dtype=np.float32).reshape(23, 2)
    y = np.arange(23, dtype=np.int64)
    batches = list(iterate_minibatches(X, y, 5, RNG(0)))
    assert [len(b[1]) for b in batches] == [5, 5, 5, 5, 3]
    seen = np.concatenate([b[1] for b in batches])
    assert sorted(seen.tolist()) == list(range(23))  # each example exactly once
    np.testing.assert_array_equal(seen, RNG(0).permutation(23))
    for Xb, yb in batches:
        np.testing.assert_array_equal(Xb, X[yb])  # images stay with their labels
    again = np.concatenate([b[1] for b in iterate_minibatches(X, y, 5, RNG(0))])
    np.testing.assert_array_equal(again, seen)
    dropped = list(iterate_minibatches(X, y, 5, RNG(0), drop_last=True))
    assert [len(b[1]) for b in dropped] == [5, 5, 5, 5]
    plain = np.concatenate([b[1] for b in iterate_minibatches(X, y, 4, None, shuffle=False)])
    np.testing.assert_array_equal(plain, y)
    with pytest.raises(ValueError, match="batch_size"):
        next(iterate_minibatches(X, y, 0, RNG(0)))
    with pytest.raises(ValueError, match="y has"):
        next(iterate_minibatches(X, y[:-1], 4, RNG(0)))


def test_sample_lm_batch_windows():
    ids = (np.arange(50) * 7) % 13  # a sequence whose windows we can locate
    rng = RNG(5)
    x, y = sample_lm_batch(ids, 8, 6, rng)
    assert x.shape == (8, 6) and y.shape == (8, 6) and x.dtype == np.int64
    starts = RNG(5).integers(0, 50 - 6, size=8)
    for b in range(8):
        s = int(starts[b])
        for t in range(6):
            assert x[b, t] == ids[s + t] and y[b, t] == ids[s + t + 1]
    x2, y2 = sample_lm_batch(ids, 8, 6, RNG(5))
    np.testing.assert_array_equal(x, x2)
    np.testing.assert_array_equal(y, y2)
    # the last token can be a target: windows reach the end of the sequence
    ends = set()
    r = RNG(6)
    for _ in range(200):
        _, yy = sample_lm_batch(np.arange(8), 4, 6, r)
        ends.update(yy[:, -1].tolist())
    assert ends == {6, 7}
    with pytest.raises(ValueError, match="block_len"):
        sample_lm_batch(np.arange(6), 2, 6, RNG(0))


def test_unigram_baseline_against_counts():
    r = np.random.default_rng(7)
    tr = r.integers(0, 5, size=200)
    va = r.integers(0, 6, size=50)  # symbol 5 never seen in training: smoothing matters
    out = unigram_bits_per_char(tr, va)
    counts = collections.Counter(tr.tolist())
    V = 6
    ref = -sum(math.log((counts[int(c)] + 1) / (len(tr) + V)) for c in va) / len(va)
    assert out["nats"] == pytest.approx(ref, rel=1e-12)
    assert out["bits"] == pytest.approx(ref / math.log(2), rel=1e-12)
    # a uniform training distribution over V symbols gives log2 V bits
    uni = unigram_bits_per_char(np.tile(np.arange(4), 25), np.arange(4), vocab_size=4)
    assert uni["bits"] == pytest.approx(2.0, rel=1e-12)
    with pytest.raises(ValueError, match="vocab_size"):
        unigram_bits_per_char(tr, va, vocab_size=3)


# --- validation split -----------------------------------------------------------------------
def test_split_validation_is_a_seeded_stratified_partition():
    from tostnp.data import split_validation, stratified_split
    y = np.repeat(np.arange(4), [10, 20, 31, 7])
    X = np.arange(y.size, dtype=np.float32)[:, None]          # row i holds i: track the rows
    Xf, yf, Xv, yv = split_validation(X, y, 0.2, seed=3)
    # a partition of the rows, labels kept with their rows
    assert sorted(np.concatenate([Xf, Xv])[:, 0].tolist()) == list(range(y.size))
    np.testing.assert_array_equal(y[Xv[:, 0].astype(int)], yv)
    # stratified: each class loses round(0.2 * n_c)
    assert [int((yv == c).sum()) for c in range(4)] == [2, 4, 6, 1]
    again = split_validation(X, y, 0.2, seed=3)
    np.testing.assert_array_equal(again[2], Xv)
    assert not np.array_equal(split_validation(X, y, 0.2, seed=4)[2], Xv)
    # the validation stream differs from stratified_split with the bare run seed
    assert not np.array_equal(stratified_split(y, 0.2, 3)[1], np.sort(Xv[:, 0]).astype(int))
    with pytest.raises(ValueError, match="fraction"):
        split_validation(X, y, 1.0, seed=0)
    with pytest.raises(ValueError, match="empty"):
        split_validation(X[:3], np.array([0, 1, 2]), 0.1, seed=0)
