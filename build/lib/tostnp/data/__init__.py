"""Offline data: small vision sets, MNIST / CIFAR-10 from local files, a text corpus, batching.

Nothing here touches the network. Every loader returns *host* NumPy arrays (this module is the
host side of the pipeline, like file parsing); the training loop moves each minibatch to its
device with :func:`tostnp.backend.from_host`.

Vision loaders return ``(X_train, y_train, X_test, y_test)`` with images channels-last,
``X: (n, H, W, C)`` float32 in [0, 1] and ``y: (n,)`` int64 class labels.

* :func:`load_digits_split` -- scikit-learn's bundled 8x8 digits (1797 images, no download),
  with a fixed, stratified train/test split.
* :func:`split_validation` -- a seeded, stratified validation set held out of the training
  images (settings are chosen on it; the test set is only reported).
* :func:`load_mnist` -- the four IDX files of MNIST (or Fashion-MNIST) from a directory you
  downloaded them to, optionally gzipped.
* :func:`load_cifar10` -- the *binary* version of CIFAR-10 (``cifar-10-batches-bin``).
* :func:`load_vision_data` -- one of the three by name; :func:`random_shift` augments a batch.

Text: :func:`load_text` (default corpus: the Python documentation topics shipped with the
standard library in ``pydoc_data.topics``, about 465k characters), :class:`CharTokenizer`,
:func:`train_val_split`, :func:`load_lm_text` (all three at once), :func:`sample_lm_batch` and
the :func:`unigram_bits_per_char` baseline.

Images are in :mod:`tostnp.data.images`, text in :mod:`tostnp.data.text`; both are imported here.
"""
from __future__ import annotations

from .images import (load_digits_split, stratified_split, split_validation, load_mnist,
                     load_cifar10, read_idx, load_vision_data, iterate_minibatches, random_shift)
from .text import (load_text, CharTokenizer, tokenizer_from_dict, train_val_split, load_lm_text,
                   sample_lm_batch, unigram_bits_per_char)

__all__ = [
    "load_digits_split", "stratified_split", "split_validation", "load_mnist", "load_cifar10",
    "read_idx", "load_vision_data", "load_text", "CharTokenizer", "tokenizer_from_dict",
    "train_val_split", "load_lm_text", "iterate_minibatches", "random_shift", "sample_lm_batch",
    "unigram_bits_per_char",
]
