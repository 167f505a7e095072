"""Image datasets for :mod:`tostnp.data`: scikit-learn's digits, MNIST and CIFAR-10 from local
files, stratified and validation splits, minibatches and random-shift augmentation. Host NumPy
arrays only; images channels-last ``(n, H, W, C)`` float32 in [0, 1], labels ``(n,)`` int64."""
from __future__ import annotations

import gzip
import math
import os

import numpy as np

from ..backend import RNG

__all__ = ["load_digits_split", "stratified_split", "split_validation", "load_mnist",
           "load_cifar10", "read_idx", "load_vision_data", "iterate_minibatches", "random_shift"]


# --------------------------------------------------------------------------------------------
# Vision
# --------------------------------------------------------------------------------------------
def stratified_split(y, fraction: float, seed: int):
    """Indices of a seeded split that keeps each class's share: ``(keep_idx, held_idx)``.

    y: (n,) integer labels. Each class's indices (classes in increasing order) are permuted with
    ``RNG(seed)`` and ``round(fraction * n_class)`` of them are held out, so the split depends
    only on the labels, ``seed`` and ``fraction``. Both index arrays are sorted.
    """
    fraction = float(fraction)
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"fraction must be in (0, 1), got {fraction}")
    y = np.asarray(y)
    rng = RNG(seed)
    held = []
    for c in np.unique(y):
        idx = np.flatnonzero(y == c)
        perm = idx[rng.permutation(idx.size)]
        held.append(perm[:int(round(fraction * idx.size))])
    held_idx = np.sort(np.concatenate(held))
    is_held = np.zeros(y.size, dtype=bool)
    is_held[held_idx] = True
    return np.flatnonzero(~is_held), held_idx


_DIGITS_SHAPE = (1797, 65)          # 64 pixels (0..16) and the label (0..9) a row
_DIGITS_MAX_BYTES = 1 << 20         # the table's text (265 KB) with room to spare


def _digits_table():
    """scikit-learn's digits: ``(pixels (1797, 64) float64 in 0..16, labels (1797,) int64)``.

    Read from the table scikit-learn ships (``sklearn/datasets/data/digits.csv.gz``, found
    without importing scikit-learn, whose import holds about 68 MB and takes a second; its
    ``load_digits`` reads the same table the same way). Its ``load_digits`` is the fallback when
    the file is not there, larger than the table can be, or not the table.
    """
    import importlib.util
    spec = importlib.util.find_spec("sklearn")
    for root in (spec.submodule_search_locations or []) if spec is not None else []:
        path = os.path.join(root, "datasets", "data", "digits.csv.gz")
        try:
            with gzip.open(path, "rb") as f:
                text = f.read(_DIGITS_MAX_BYTES + 1)
            if len(text) > _DIGITS_MAX_BYTES:
                continue
            table = np.loadtxt(text.decode("ascii").splitlines(), delimiter=",", ndmin=2)
        except (OSError, ValueError, EOFError, UnicodeDecodeError):
            continue
        pixels, labels = table[:, :-1], table[:, -1]
        if (table.shape == _DIGITS_SHAPE and np.all(table == np.round(table))
                and pixels.min() >= 0 and pixels.max() <= 16
                and set(np.unique(labels)) == set(range(10))):
            return pixels, labels.astype(np.int64)
    from sklearn.datasets import load_digits  # bundled with scikit-learn: no download
    d = load_digits()
    return np.asarray(d.data, dtype=np.float64), np.asarray(d.target, dtype=np.int64)


def load_digits_split(seed: int = 0, test_fraction: float = 0.25):
    """scikit-learn's 8x8 digits with a fixed stratified train/test split.

    The test set is :func:`stratified_split` of the labels with ``test_fraction`` and ``seed``,
    so it depends only on ``seed`` and ``test_fraction`` (not on the scikit-learn version).
    Both sets are returned in increasing original-index order.

    Returns ``X_train (n_train, 8, 8, 1)`` float32 in [0, 1] (pixel / 16), ``y_train (n_train,)``
    int64, ``X_test``, ``y_test``.
    """
    test_fraction = float(test_fraction)
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    pixels, y = _digits_table()
    X = (pixels / 16.0).astype(np.float32).reshape(-1, 8, 8, 1)
    train_idx, test_idx = stratified_split(y, test_fraction, seed)
    return X[train_idx], y[train_idx], X[test_idx], y[test_idx]


def split_validation(X, y, val_fraction: float, seed: int):
    """Hold a validation set out of the training images: ``(X_fit, y_fit, X_val, y_val)``.

    Stratified by class and seeded (:func:`stratified_split` with ``RNG(VAL_SEED_OFFSET +
    seed)``, a stream apart from the init and data-order streams of the same run seed). The
    validation set chooses settings; the test set is only reported.
    """
    if len(X) != len(y):
        raise ValueError(f"X has {len(X)} examples but y has {len(y)}")
    fit_idx, val_idx = stratified_split(y, val_fraction, VAL_SEED_OFFSET + int(seed))
    if val_idx.size == 0 or fit_idx.size == 0:
        raise ValueError(f"val_fraction {val_fraction} leaves an empty split of {len(y)} "
                         f"training images")
    return X[fit_idx], y[fit_idx], X[val_idx], y[val_idx]


VAL_SEED_OFFSET = 20_000


MAX_IDX_BYTES = 1 << 31     # an IDX file of the data sets read here is at most ~200 MB


def _read_bytes(path: str) -> bytes:
    """All bytes of ``path`` (transparently gunzipped if it ends in .gz), with clear errors.
    A gzip member's size is not known before inflating it: it is read in pieces, and the bytes
    so far are held to the memory budget and to :data:`MAX_IDX_BYTES` as they grow."""
    from ..backend.budget import check_memory
    try:
        if not os.path.isfile(path):
            if os.path.exists(path):
                raise ValueError(f"{path} is not a regular file")
            raise FileNotFoundError(f"{path} does not exist")
        check_memory(2 * os.path.getsize(path), f"reading {path}")
        opener = gzip.open if path.endswith(".gz") else open
        pieces, total = [], 0
        with opener(path, "rb") as f:
            while True:
                piece = f.read(1 << 24)
                if not piece:
                    break
                total += len(piece)
                if total > MAX_IDX_BYTES:
                    raise ValueError(f"{path} inflates to more than {MAX_IDX_BYTES:,} bytes; "
                                     f"not an MNIST/CIFAR file")
                check_memory(2 * total, f"reading {path} ({total:,} bytes inflated so far)")
                pieces.append(piece)
        return b"".join(pieces)
    except (EOFError, gzip.BadGzipFile, OSError) as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise ValueError(f"could not read {path}: {e} (truncated or corrupted download?)") from e


def read_idx(path: str, expected_magic: int) -> np.ndarray:
    """Parse one IDX file (the MNIST format) into a uint8 array.

    Layout: a big-endian uint32 magic number ``0x00000800 + ndim`` (0x08 = unsigned byte
    data; 0x00000803 for images, 0x00000801 for labels), then ``ndim`` big-endian uint32
    sizes, then ``prod(sizes)`` bytes of data in C order.
    """
    raw = _read_bytes(path)
    if len(raw) < 4:
        raise ValueError(f"{path}: file has {len(raw)} bytes, too short for an IDX header "
                         f"(truncated?)")
    magic = int.from_bytes(raw[:4], "big")
    if magic != expected_magic:
        raise ValueError(f"{path}: IDX magic number is 0x{magic:08x}, expected "
                         f"0x{expected_magic:08x} (wrong file, or not an IDX file)")
    ndim = magic & 0xFF
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"{path}: IDX header needs {header} bytes, file has {len(raw)} "
                         f"(truncated?)")
    shape = tuple(int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    need = header + math.prod(shape)
    if len(raw) != need:
        what = "truncated" if len(raw) < need else "has trailing bytes"
        raise ValueError(f"{path}: header says shape {shape} = {need} bytes in all, file has "
                         f"{len(raw)} bytes ({what})")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(shape)


def _find(directory: str, names) -> str:
    for name in names:
        p = os.path.join(directory, name)
        if os.path.isfile(p):
            return p
    raise FileNotFoundError(f"none of {list(names)} found in {directory!r}")


def load_mnist(directory: str):
    """MNIST (or Fashion-MNIST) from the four IDX files in ``directory``.

    Expects ``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte``
    and ``t10k-labels-idx1-ubyte`` (each also accepted with ``.gz``, or with a ``.`` instead of
    the last ``-``). Returns ``X_train (n, 28, 28, 1)`` float32 in [0, 1] (pixel / 255),
    ``y_train (n,)`` int64, ``X_test``, ``y_test``.
    """
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"MNIST directory {directory!r} does not exist; download the "
                                f"four IDX files (train-images-idx3-ubyte.gz, ...) into it")
    out = []
    for split in ("train", "t10k"):
        names = {}
        for kind, suffix in (("images", "idx3-ubyte"), ("labels", "idx1-ubyte")):
            base = [f"{split}-{kind}-{suffix}", f"{split}-{kind}.{suffix}"]
            names[kind] = _find(directory, base + [b + ".gz" for b in base])
        images = read_idx(names["images"], 0x00000803)  # (n, rows, cols)
        labels = read_idx(names["labels"], 0x00000801)  # (n,)
        if images.shape[0] != labels.shape[0]:
            raise ValueError(f"{names['images']} holds {images.shape[0]} images but "
                             f"{names['labels']} holds {labels.shape[0]} labels")
        if labels.size and labels.max() > 9:
            raise ValueError(f"{names['labels']}: labels must be 0..9, found {labels.max()}")
        X = (images.astype(np.float32) / np.float32(255.0))[..., None]  # (n, rows, cols, 1)
        out += [X, labels.astype(np.int64)]
    return tuple(out)


_CIFAR_RECORD = 1 + 3 * 32 * 32  # one label byte + 3072 pixel bytes (R plane, G, B; row-major)


def _read_cifar_file(path: str):
    raw = _read_bytes(path)
    if len(raw) == 0 or len(raw) % _CIFAR_RECORD:
        raise ValueError(f"{path}: {len(raw)} bytes is not a positive multiple of the "
                         f"{_CIFAR_RECORD}-byte CIFAR-10 record (truncated or wrong file?)")
    rec = np.frombuffer(raw, dtype=np.uint8).reshape(-1, _CIFAR_RECORD)
    labels = rec[:, 0].astype(np.int64)
    if labels.max() > 9:
        raise ValueError(f"{path}: labels must be 0..9, found {labels.max()} (wrong file? "
                         f"CIFAR-100 has 2 label bytes per record)")
    X = rec[:, 1:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)  # CHW -> (n, 32, 32, 3)
    return (X.astype(np.float32) / np.float32(255.0)), labels


def load_cifar10(directory: str):
    """CIFAR-10, binary version: ``data_batch_1.bin`` .. ``data_batch_5.bin`` + ``test_batch.bin``.

    ``directory`` is the extracted ``cifar-10-batches-bin`` folder or its parent. Each record
    is 1 label byte followed by 3072 bytes: the 32x32 red plane, then green, then blue.
    Returns ``X_train (50000, 32, 32, 3)`` float32 in [0, 1], ``y_train`` int64, ``X_test``,
    ``y_test``. (The Python "pickle" version is not read: unpickling runs code.)
    """
    sub = os.path.join(directory, "cifar-10-batches-bin")
    if os.path.isdir(sub):
        directory = sub
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"CIFAR-10 directory {directory!r} does not exist; download "
                                f"the binary version (cifar-10-binary.tar.gz) and extract it")
    train_files = [os.path.join(directory, f"data_batch_{i}.bin") for i in range(1, 6)]
    test_file = os.path.join(directory, "test_batch.bin")
    for p in train_files + [test_file]:
        if not os.path.isfile(p):
            hint = ""
            if os.path.isfile(os.path.join(directory, "data_batch_1")):
                hint = " (this looks like the Python pickle version; use the binary version)"
            raise FileNotFoundError(f"CIFAR-10 file {p!r} is missing{hint}")
    parts = [_read_cifar_file(p) for p in train_files]
    X_train = np.concatenate([X for X, _ in parts])
    y_train = np.concatenate([y for _, y in parts])
    X_test, y_test = _read_cifar_file(test_file)
    return X_train, y_train, X_test, y_test


def load_vision_data(name: str = "digits", data_dir: str | None = None):
    """(X_train, y_train, X_test, y_test) host arrays for "digits" | "mnist" | "cifar10"."""
    if name == "digits":
        return load_digits_split()
    if name in ("mnist", "cifar10"):
        if not data_dir:
            raise ValueError(f"--data {name} needs --data-dir: the directory holding the "
                             f"downloaded files (tostnp never downloads)")
        return load_mnist(data_dir) if name == "mnist" else load_cifar10(data_dir)
    raise ValueError(f"data must be 'digits', 'mnist' or 'cifar10', got {name!r}")


# --------------------------------------------------------------------------------------------
# Batching and augmentation (host arrays; deterministic for a given RNG state)
# --------------------------------------------------------------------------------------------
def iterate_minibatches(X, y, batch_size: int, rng: RNG | None, shuffle: bool = True,
                        drop_last: bool = False):
    """Yield ``(X_b, y_b)`` host minibatches covering ``X`` once (one epoch).

    X: (n, ...), y: (n,). With ``shuffle`` the order is ``rng.permutation(n)``; the last,
    smaller batch is kept unless ``drop_last``.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
    n = len(X)
    if len(y) != n:
        raise ValueError(f"X has {n} examples but y has {len(y)}; expected X (n, ...), y (n,)")
    if shuffle:
        if rng is None:
            raise ValueError("shuffle=True needs an rng (tostnp.backend.RNG)")
        order = rng.permutation(n)
    else:
        order = np.arange(n)
    stop = n - (n % batch_size) if drop_last else n
    for start in range(0, stop, batch_size):
        idx = order[start:start + batch_size]
        yield X[idx], y[idx]


def random_shift(X: np.ndarray, max_shift: int, rng) -> np.ndarray:
    """Host augmentation: translate each image by up to ``max_shift`` pixels (zero fill).

    X: (B, H, W, C) host array -> (B, H, W, C). Draws 2 integers per image from ``rng``.
    """
    if max_shift <= 0:
        return X
    B, H, W, _ = X.shape
    s = max_shift
    pad = np.pad(X, ((0, 0), (s, s), (s, s), (0, 0)))
    dy = rng.integers(0, 2 * s + 1, size=B)
    dx = rng.integers(0, 2 * s + 1, size=B)
    rows = dy[:, None] + np.arange(H)[None, :]                          # (B, H)
    cols = dx[:, None] + np.arange(W)[None, :]                          # (B, W)
    return pad[np.arange(B)[:, None, None], rows[:, :, None], cols[:, None, :]]
