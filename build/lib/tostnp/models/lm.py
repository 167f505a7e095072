"""The causal ToST language model (nanoGPT layout with causal TSSA in place of attention).

    x      = wte[ids] + wpe[:T]                                  # (B, T, C)
    for each block:  x = tost_block(x, causal=True)              # O(T) per layer, no T x T matrix
    logits = LayerNorm(x) @ wte^T                                # (B, T, V), head tied to wte

The head is tied to the token embedding, so the gradient of ``wte`` is the SUM of its two uses
(the embedding lookup, scattered by token id, and the output projection).

Init (as in the published ToST language models): every weight N(0, 0.02); the two output projections of each block
(TSSA ``W_o`` and MLP ``W2``) N(0, 0.02 / sqrt(2 * depth)); LayerScale gammas 1e-5; LN eps 1e-5.
``cfg.bias`` adds linear biases and LayerNorm shifts (nanoGPT's ``bias``; the published training
uses False: neither); ``cfg.ln_bias`` keeps the shifts alone ("tiny-char" has them).

Generation (:func:`lm_generate`) uses the recurrent decoder of the causal TSSA: each layer carries
its prefix statistics (S1, S2, S3), so each new token costs O(1) in the context length (the
published code re-runs the whole forward for every token). The learned ``denom_bias`` and the
position table have ``block_size`` rows, so the state can only hold ``block_size`` tokens: when
it is full, generation keeps the last ``block_size // 2`` tokens and rebuilds the state from them
(amortised O(1) per token; the model never sees a context longer than it was trained on).

Parameters: "wte" (V, C), "wpe" (block_size, C), "blocks.{i}.<tost block keys>",
"ln_f.gamma", "ln_f.beta" (with LayerNorm shifts).
"""
from __future__ import annotations

import contextlib
import math

from .. import backend
from ..backend.validate import checked_once, trusted
from ..nn import layers as L
from ..nn import block as Bk
from ..nn.params import sub, prefixed, num_params
from .configs import LMConfig

__all__ = ["lm_init", "lm_forward", "lm_backward", "lm_loss_and_grads", "lm_generate"]


def lm_init(cfg: LMConfig, rng, xp, dtype=None, device=None) -> dict:
    """Fresh parameters for ``cfg`` (see the module docstring for the init)."""
    cfg.validate()
    dtype = xp.float32 if dtype is None else dtype
    C, std = cfg.width, cfg.init_std
    params = {
        "wte": rng.normal(xp, (cfg.vocab_size, C), dtype, std=std, device=device),
        "wpe": rng.normal(xp, (cfg.block_size, C), dtype, std=std, device=device),
    }
    std_out = std / math.sqrt(2 * cfg.depth)
    for i in range(cfg.depth):
        bp = Bk.tost_block_init(rng, xp, C, cfg.num_heads, causal=True,
                                max_len=cfg.block_size, bias=cfg.bias, ln_bias=cfg.ln_shift,
                                layer_scale_init=cfg.layer_scale_init,
                                mlp_ratio=cfg.mlp_ratio, dtype=dtype, device=device,
                                std=std, std_out=std_out, mixer=cfg.mixer)
        params.update(prefixed(bp, f"blocks.{i}"))
    params["ln_f.gamma"] = xp.ones((C,), dtype=dtype, device=device)
    if cfg.ln_shift:
        params["ln_f.beta"] = xp.zeros((C,), dtype=dtype, device=device)
    return params



def _check_ids(ids, cfg):
    xp = backend.namespace(ids)
    if ids.ndim != 2 or xp.isdtype(ids.dtype, "real floating"):
        raise ValueError(f"ids must be an integer array of shape (B, T), got "
                         f"{ids.dtype} {tuple(ids.shape)}")
    if ids.shape[1] > cfg.block_size:
        raise ValueError(f"ids has T = {ids.shape[1]} tokens, more than block_size = "
                         f"{cfg.block_size}")
    return xp


def lm_forward(ids, params: dict, cfg: LMConfig):
    """ids (B, T) integer -> (logits (B, T, V), cache).

    The parameters are checked by every layer on the first call with their names, shapes and
    dtypes, and not again on later calls with the same ones (:func:`tostnp.backend.validate.checked_once`);
    ``ids`` are checked on every call.
    """
    xp = _check_ids(ids, cfg)
    with checked_once(("lm", cfg), params, ids) as trusted:
        logits, cache = _forward(ids, params, cfg, xp)
    cache["trusted"] = trusted
    return logits, cache


def _forward(ids, params, cfg, xp):
    T = ids.shape[1]
    tok, c_emb = L.embedding_forward(ids, params["wte"])                  # (B, T, C)
    x = tok + params["wpe"][:T, :]
    c_blocks = []
    for i in range(cfg.depth):
        x, c = Bk.tost_block_forward(x, sub(params, f"blocks.{i}"), cfg.num_heads,
                                     causal=True, ln_eps=cfg.ln_eps, gelu=cfg.gelu,
                                     mixer=cfg.mixer)
        c_blocks.append(c)
    h, c_ln = L.layer_norm_forward(x, params["ln_f.gamma"], params.get("ln_f.beta"), cfg.ln_eps)
    logits = L.rows_matmul(xp, h, xp.matrix_transpose(params["wte"]))      # (B, T, V)
    return logits, {"emb": c_emb, "blocks": c_blocks, "ln_f": c_ln, "h": h, "T": T,
                    "wte": params["wte"], "cfg": cfg}


def lm_backward(dlogits, cache) -> dict:
    """dlogits (B, T, V) -> grads (same keys as the parameters)."""
    with trusted() if cache.get("trusted") else contextlib.nullcontext():
        return _backward(dlogits, cache)


def _backward(dlogits, cache) -> dict:
    xp = backend.namespace(dlogits)
    cfg, T, h, wte = cache["cfg"], cache["T"], cache["h"], cache["wte"]
    V, C = wte.shape
    d2 = xp.reshape(dlogits, (-1, V))                                      # (B*T, V)
    dwte_head = xp.matrix_transpose(d2) @ xp.reshape(h, (-1, C))           # (V, C)
    dh = L.rows_matmul(xp, dlogits, wte)                                   # (B, T, C)
    grads = {}
    dx, g = L.layer_norm_backward(dh, cache["ln_f"]); grads.update(prefixed(g, "ln_f"))
    for i in reversed(range(cfg.depth)):
        dx, g = Bk.tost_block_backward(dx, cache["blocks"][i])
        grads.update(prefixed(g, f"blocks.{i}"))
    dwpe = xp.sum(dx, axis=0)                                              # (T, C)
    if T < cfg.block_size:
        dwpe = xp.concat([dwpe, xp.zeros((cfg.block_size - T, C), dtype=dwpe.dtype,
                                         device=backend.device_of(dwpe))], axis=0)
    grads["wpe"] = dwpe
    _, g = L.embedding_backward(dx, cache["emb"])
    grads["wte"] = g["W"] + dwte_head                                      # tied: sum both uses
    return grads


def lm_loss_and_grads(params: dict, ids, targets, cfg: LMConfig):
    """Mean next-token cross-entropy -> (loss (0-d array), grads, logits)."""
    logits, cache = lm_forward(ids, params, cfg)
    loss, c_loss = L.softmax_cross_entropy_forward(logits, targets)
    xp = backend.namespace(logits)
    dlogits, _ = L.softmax_cross_entropy_backward(xp.ones_like(loss), c_loss)
    return loss, lm_backward(dlogits, cache), logits


# --------------------------------------------------------------------------------------------
# generation with the O(1)-per-token recurrent decoder
# --------------------------------------------------------------------------------------------
class _Decoder:
    """Per-layer recurrent TSSA states for a batch of B sequences."""

    def __init__(self, params, cfg, batch):
        self.params, self.cfg, self.B = params, cfg, batch
        self.blocks = [sub(params, f"blocks.{i}") for i in range(cfg.depth)]
        self.reset()

    def reset(self):
        self.states = [Bk.tost_block_decode_init(self.B, p, self.cfg.num_heads)
                       for p in self.blocks]
        self.t = 0

    def step(self, ids_t):
        """ids_t (B,) int -> logits (B, V) for the next token."""
        xp = backend.namespace(ids_t)
        cfg, p = self.cfg, self.params
        x = xp.take(p["wte"], ids_t, axis=0) + p["wpe"][self.t, :]        # (B, C)
        for i, bp in enumerate(self.blocks):
            x, self.states[i] = Bk.tost_block_decode_step(self.states[i], x, bp, cfg.num_heads,
                                                          self.t, ln_eps=cfg.ln_eps,
                                                          gelu=cfg.gelu)
        self.t += 1
        h, _ = L.layer_norm_forward(x, p["ln_f.gamma"], p.get("ln_f.beta"), cfg.ln_eps)
        return h @ xp.matrix_transpose(p["wte"])                           # (B, V)


def _pick(logits, temperature: float, top_k, rng):
    """Next token per row, on the logits' device (no host transfer per token).

    logits (B, V) -> (B,) int64. temperature 0: greedy argmax. Otherwise softmax(logits / T)
    restricted to the top_k largest, sampled by inverse CDF with one uniform per row drawn from
    the seeded host RNG (so one seed gives the same draws on every backend).
    """
    xp = backend.namespace(logits)
    if temperature == 0:
        return xp.astype(xp.argmax(logits, axis=-1), xp.int64)
    B, V = logits.shape
    z = logits / temperature                                               # (B, V)
    if top_k is not None and top_k < V:
        kth = xp.sort(z, axis=-1)[:, V - top_k:V - top_k + 1]              # (B, 1)
        z = xp.where(z < kth, -xp.inf, z)
    z = z - xp.max(z, axis=-1, keepdims=True)
    pr = xp.exp(z)
    cdf = xp.cumulative_sum(pr / xp.sum(pr, axis=-1, keepdims=True), axis=-1)  # (B, V)
    u = rng.uniform(xp, (B, 1), logits.dtype, device=backend.device_of(logits))
    idx = xp.sum(xp.astype(cdf < u, xp.int64), axis=-1)                    # (B,)
    return xp.clip(idx, max=V - 1)


def lm_generate(params: dict, cfg: LMConfig, prompt_ids, length: int, *,
                temperature: float = 1.0, top_k=None, seed: int = 0):
    """Continue ``prompt_ids`` (B, T0) int (T0 >= 1) by ``length`` tokens -> (B, T0 + length).

    temperature 0 is greedy decoding; top_k keeps the k most likely tokens; seeded. Uses the
    recurrent decoder: the prompt is fed one token at a time, then each new token costs O(1) in
    the context length. Everything stays on the device of ``prompt_ids`` (int64 result).
    """
    xp = backend.namespace(prompt_ids)
    if prompt_ids.ndim != 2 or prompt_ids.shape[1] < 1:
        raise ValueError(f"prompt_ids must have shape (B, T0) with T0 >= 1, got "
                         f"{tuple(prompt_ids.shape)}")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be >= 1 or None, got {top_k}")
    if length < 0:
        raise ValueError(f"length must be >= 0, got {length}")
    rng = backend.RNG(seed)
    seq = xp.astype(prompt_ids, xp.int64)                                  # (B, T0)
    if cfg.mixer != "tssa":
        # the baselines (and TSSA with a fixed Pi) have no recurrent decoder here: re-run the
        # forward over the last block_size tokens for every new token (O(T) per token or more)
        for _ in range(length):
            logits, _ = lm_forward(seq[:, -cfg.block_size:], params, cfg)
            nxt = _pick(logits[:, -1, :], temperature, top_k, rng)         # (B,)
            seq = xp.concat([seq, xp.reshape(nxt, (-1, 1))], axis=1)
        return seq
    dec = _Decoder(params, cfg, seq.shape[0])

    def feed(tokens):                                                      # (B, t) -> logits
        logits = None
        for s in range(tokens.shape[1]):
            logits = dec.step(tokens[:, s])
        return logits

    window = cfg.block_size
    logits = feed(seq[:, -window:] if seq.shape[1] > window else seq)
    for _ in range(length):
        nxt = _pick(logits, temperature, top_k, rng)                       # (B,)
        seq = xp.concat([seq, xp.reshape(nxt, (-1, 1))], axis=1)
        if dec.t >= window:            # state full: keep the last half, rebuild from it
            dec.reset()
            logits = feed(seq[:, seq.shape[1] - max(window // 2, 1):])
        else:
            logits = feed(seq[:, -1:])
    return seq


def describe(cfg: LMConfig, params: dict) -> str:
    return (f"ToST LM: {cfg.depth} blocks, width {cfg.width}, {cfg.num_heads} heads, "
            f"context {cfg.block_size}, vocab {cfg.vocab_size}: {num_params(params):,} parameters")
