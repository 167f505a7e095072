"""Tasks for :func:`tostnp.train.loop.train`: a model plus its data, batching, loss and evaluation.
(The data themselves -- loading, augmentation, LM windows -- are in :mod:`tostnp.data`.)

A task provides ``kind``, ``cfg``, ``title``, ``xp``/``device``/``dtype``, and

    init_params(rng) -> params                 next_batch() -> host batch
    loss_and_grads(params, batch) -> (loss, grads, extra metrics)
    evaluate(params) -> {"name": float}        meta() -> JSON-able dict for the checkpoint
    data_state() -> (json_state, arrays)       set_data_state(json_state, arrays)

Data stay on the host (NumPy, like a data loader); each minibatch is moved to the compute device
with :func:`tostnp.backend.from_host`. All randomness in the data pipeline (epoch order,
augmentation, LM windows) comes from one seeded :class:`tostnp.backend.RNG` per task whose state
is part of ``data_state``, so a resumed run sees exactly the batches of an uninterrupted one.
"""
from __future__ import annotations

import math

import numpy as np

from .. import backend
from ..data import iterate_minibatches, random_shift, sample_lm_batch, unigram_bits_per_char
from ..models.vision import vision_init, vision_forward, vision_loss_and_grads
from ..models.lm import lm_init, lm_forward, lm_loss_and_grads
from ..models.seqcls import seqcls_init, seqcls_forward, seqcls_loss_and_grads
from ..nn.layers import softmax_cross_entropy_forward
from .shards import shard_count, sharded

__all__ = ["VisionTask", "SeqTask", "LMTask"]


def _on_device(task, x, y, x_dtype):
    """A host batch on the task's device: the inputs x as ``x_dtype``, the labels y as int64."""
    xp = task.xp
    return (backend.from_host(xp, x, dtype=x_dtype, device=task.device),
            backend.from_host(xp, y, dtype=xp.int64, device=task.device))


class VisionTask:
    """Image classification. ``data = (X_train, y_train, X_test, y_test)``; with ``val=(X_val,
    y_val)`` (held out of the training images, see :func:`tostnp.data.split_validation`) the
    periodic evaluation uses the validation set and the test set is left to
    :meth:`evaluate_test`, called once at the end; without it, both are the test set.
    """
    kind = "vision"

    def __init__(self, cfg, data, *, batch_size, seed=0, augment_shift=0, xp=None, device=None,
                 dtype=None, data_name="digits", eval_batch_size=500, extra_meta=None, val=None):
        self.cfg = cfg
        self.X_train, self.y_train, self.X_test, self.y_test = data
        self.val = None if val is None else (val[0], val[1])
        self._check_data(data_name)
        self.batch_size = min(int(batch_size), len(self.X_train))
        self.augment_shift = int(augment_shift)
        self.xp = backend.get_xp("cpu") if xp is None else xp
        self.device = device
        self.dtype = self.xp.float32 if dtype is None else dtype
        self.data_name = data_name
        self.eval_batch_size = eval_batch_size
        self.extra_meta = dict(extra_meta or {})
        self.title = f"ToST on {data_name}"
        self.rng = backend.RNG(seed + 1)  # data order + augmentation (init uses RNG(seed))
        self.perm = self.rng.permutation(len(self.X_train))
        self.pos = 0

    def _check_data(self, data_name):
        cfg = self.cfg
        if tuple(self.X_train.shape[1:]) != (cfg.image_size, cfg.image_size, cfg.in_chans):
            raise ValueError(f"the {data_name} images have shape {self.X_train.shape[1:]}, but "
                             f"the config expects ({cfg.image_size}, {cfg.image_size}, "
                             f"{cfg.in_chans}); pick a matching --config")

    def _inputs(self, X, train: bool):
        """Host inputs of a batch -> host model inputs (training batches are augmented)."""
        return random_shift(X, self.augment_shift, self.rng) if train else X

    def _forward(self, X, params):
        return vision_forward(X, params, self.cfg)

    def _loss_and_grads(self, params, X, y):
        # train=True: BatchNorm uses batch statistics and updates its running ones in params
        return vision_loss_and_grads(params, X, y, self.cfg, train=True)

    @property
    def steps_per_epoch(self) -> int:
        return len(self.X_train) // self.batch_size

    def init_params(self, rng):
        return vision_init(self.cfg, rng, self.xp, self.dtype, self.device)

    def _to_device(self, X, y):
        return _on_device(self, X, y, self.dtype)

    def next_batch(self):
        """Epochs of fixed-size batches (the incomplete tail of an epoch is skipped). Unlike
        :func:`tostnp.data.iterate_minibatches` (one epoch, a generator), the stream is endless
        and its state (RNG, permutation, position) goes into the checkpoint."""
        if self.pos + self.batch_size > len(self.perm):
            self.perm = self.rng.permutation(len(self.X_train))
            self.pos = 0
        idx = self.perm[self.pos:self.pos + self.batch_size]
        self.pos += self.batch_size
        return self._to_device(self._inputs(self.X_train[idx], True), self.y_train[idx])

    def _row_elements(self, X) -> int:
        """Tokens x width of one image's activations in the blocks."""
        return self.cfg.block_tokens * self.cfg.width

    def shards(self, params) -> int:
        """The shards a training batch runs in (:mod:`tostnp.train.shards`; 1: whole)."""
        return shard_count(self.xp, params, self.batch_size, self._row_elements(self.X_train))

    def loss_and_grads(self, params, batch):
        """One batch's mean loss and gradients, on the CPU's threads in shards of the batch
        (:mod:`tostnp.train.shards`) -> (loss, grads, {"acc": accuracy})."""
        images, labels = batch
        loss, grads, logits = sharded(self._loss_and_grads, params, (images, labels), self.xp,
                                      row_elements=self._row_elements(images))
        xp = self.xp
        acc = xp.mean(xp.astype(xp.argmax(logits, axis=-1) == labels, self.dtype))
        return loss, grads, {"acc": acc}

    def evaluate(self, params) -> dict:
        """Loss and accuracy on the validation set (``val_*``), or the test set without one."""
        if self.val is None:
            return self.evaluate_test(params)
        return self._evaluate_on(params, *self.val, "val")

    def evaluate_test(self, params) -> dict:
        """Loss and accuracy on the whole test set (``test_loss``, ``test_acc``)."""
        return self._evaluate_on(params, self.X_test, self.y_test, "test")

    def _evaluate_on(self, params, X_all, y_all, name) -> dict:
        xp = self.xp
        tot_loss, correct, n = 0.0, 0, len(X_all)
        for Xb, yb in iterate_minibatches(X_all, y_all, self.eval_batch_size, None,
                                          shuffle=False):
            X, y = self._to_device(self._inputs(Xb, False), yb)
            logits, _ = self._forward(X, params)
            loss, _ = softmax_cross_entropy_forward(logits, y)
            tot_loss += float(loss) * y.shape[0]
            correct += int(xp.sum(xp.astype(xp.argmax(logits, axis=-1) == y, xp.int64)))
        return {f"{name}_loss": tot_loss / n, f"{name}_acc": correct / n}

    def data_state(self):
        return {"rng": self.rng.get_state(), "pos": self.pos}, {"perm": self.perm}

    def set_data_state(self, state, arrays):
        n = len(self.X_train)
        perm, pos = arrays.get("perm"), state.get("pos")
        if not (isinstance(perm, np.ndarray) and perm.ndim == 1 and perm.shape[0] == n
                and np.issubdtype(perm.dtype, np.integer)
                and np.array_equal(np.sort(perm), np.arange(n))):
            raise ValueError(f"data state 'perm' must be a permutation of the {n} training "
                             f"images (integers 0..{n - 1}, each once), got "
                             f"{getattr(perm, 'dtype', type(perm).__name__)} of shape "
                             f"{getattr(perm, 'shape', None)}")
        if isinstance(pos, bool) or not isinstance(pos, int) or not 0 <= pos <= n:
            raise ValueError(f"data state 'pos' must be an int in [0, {n}], got {pos!r}")
        self.rng.set_state(state["rng"])
        self.pos = pos
        self.perm = perm.astype(np.int64)

    def meta(self) -> dict:
        return {"data": self.data_name, "augment_shift": self.augment_shift, **self.extra_meta}


class SeqTask(VisionTask):
    """A sequence classifier (:mod:`tostnp.models.seqcls`) on host arrays: X (n, N, d) float
    features, or (n, N) int token ids given one-hot to the model (``one_hot_vocab``).

    Same batching, evaluation and state as :class:`VisionTask` (no augmentation).
    """
    kind = "seq"

    def __init__(self, cfg, data, *, one_hot_vocab=None, **kw):
        self.one_hot_vocab = one_hot_vocab
        super().__init__(cfg, data, augment_shift=0, **kw)
        self.title = f"{cfg.mixer} sequence classifier on {self.data_name}"

    def _check_data(self, data_name):
        d = self.one_hot_vocab or self.X_train.shape[-1]
        if d != self.cfg.in_dim or self.X_train.shape[1] > self.cfg.max_len:
            raise ValueError(f"the {data_name} sequences have shape {self.X_train.shape[1:]}, "
                             f"but the config expects at most {self.cfg.max_len} tokens of "
                             f"width {self.cfg.in_dim}")

    def _inputs(self, X, train: bool):
        if self.one_hot_vocab is None:
            return X
        return np.eye(self.one_hot_vocab, dtype=np.float32)[X]

    def init_params(self, rng):
        return seqcls_init(self.cfg, rng, self.xp, self.dtype, self.device)

    def _forward(self, X, params):
        return seqcls_forward(X, params, self.cfg)

    def _row_elements(self, X) -> int:
        return (1 + X.shape[1]) * self.cfg.width       # the CLS token and the sequence

    def _loss_and_grads(self, params, X, y):
        return seqcls_loss_and_grads(params, X, y, self.cfg)


class LMTask:
    kind = "lm"

    def __init__(self, cfg, train_ids, val_ids, tokenizer, *, batch_size, seed=0,
                 eval_batches=8, xp=None, device=None, dtype=None, text_name="default corpus",
                 extra_meta=None):
        self.cfg = cfg
        self.train_ids, self.val_ids, self.tokenizer = train_ids, val_ids, tokenizer
        self.batch_size = int(batch_size)
        self.eval_batches = int(eval_batches)
        self.xp = backend.get_xp("cpu") if xp is None else xp
        self.device = device
        self.dtype = self.xp.float32 if dtype is None else dtype
        self.text_name = text_name
        self.title = f"ToST char-LM on {text_name}"
        self.rng = backend.RNG(seed + 1)
        self.seed = seed
        self.extra_meta = dict(extra_meta or {})
        self.token_lengths = np.asarray(tokenizer.token_lengths)     # (V,) characters per id
        self.unigram = unigram_bits_per_char(train_ids, val_ids, cfg.vocab_size,
                                             self.token_lengths)

    def init_params(self, rng):
        return lm_init(self.cfg, rng, self.xp, self.dtype, self.device)

    def _to_device(self, x, y):
        return _on_device(self, x, y, self.xp.int64)

    def next_batch(self):
        return self._to_device(*sample_lm_batch(self.train_ids, self.batch_size,
                                                self.cfg.block_size, self.rng))

    def _loss_and_grads(self, params, ids, targets):
        loss, grads, _ = lm_loss_and_grads(params, ids, targets, self.cfg)
        return loss, grads, None

    def shards(self, params) -> int:
        """The shards a training batch runs in (:mod:`tostnp.train.shards`; 1: whole)."""
        return shard_count(self.xp, params, self.batch_size, self.cfg.block_size * self.cfg.width)

    def loss_and_grads(self, params, batch):
        """One batch's mean loss and gradients, on the CPU's threads in shards of the batch
        (:mod:`tostnp.train.shards`) -> (loss, grads, {})."""
        ids, targets = batch
        loss, grads, _ = sharded(self._loss_and_grads, params, (ids, targets), self.xp,
                                 row_elements=ids.shape[1] * self.cfg.width)
        return loss, grads, {}

    def evaluate(self, params) -> dict:
        """Loss over ``eval_batches`` fixed validation windows (same windows every time).

        ``val_loss``: nats per token; ``val_bpc``: bits per character, the summed loss divided
        by the number of characters the target tokens spell (the same for any tokenizer).
        """
        rng = backend.RNG(10_000 + self.seed)
        T = min(self.cfg.block_size, len(self.val_ids) - 1)
        nats = 0.0
        tokens = chars = 0
        for _ in range(self.eval_batches):
            x_host, y_host = sample_lm_batch(self.val_ids, self.batch_size, T, rng)
            x, y = self._to_device(x_host, y_host)
            logits, _ = lm_forward(x, params, self.cfg)
            loss, _ = softmax_cross_entropy_forward(logits, y)      # mean over B*T tokens
            nats += float(loss) * y_host.size
            tokens += y_host.size
            chars += int(self.token_lengths[y_host].sum())
        return {"val_loss": nats / tokens, "val_bpc": nats / chars / math.log(2.0)}

    def data_state(self):
        return {"rng": self.rng.get_state()}, {}

    def set_data_state(self, state, arrays):
        self.rng.set_state(state["rng"])

    def meta(self) -> dict:
        return {"tokenizer": self.tokenizer.to_dict(), "text": self.text_name,
                "unigram_nats": self.unigram["nats"], "unigram_bits": self.unigram["bits"],
                "eval_batches": self.eval_batches, **self.extra_meta}
