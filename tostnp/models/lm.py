"""The causal ToST language model (nanoGPT layout with causal TSSA in place of attention).

    x      = wte[ids] + wpe[:T]                                  # (B, T, C)
    for each block:  x = tost_block(x, causal=True)              # O(T) per layer, no T x T matrix
    logits = LayerNorm(x) @ wte^T                                # (B, T, V), head tied to wte

The head is tied to the token embedding, so the gradient of ``wte`` is the SUM of its two uses
(the embedding lookup, scattered by token id, and the output projection).

Init (as in the published ToST language models): every weight N(0, 0.02); the two output projections of each block
(TSSA ``W_o`` and MLP ``W2``) N(0, 0.02 / sqrt(2 * depth)); LayerScale gammas 1e-5; LN eps 1e-5.
``cfg.bias`` adds linear biases and LayerNorm shifts (nanoGPT's ``bias``; the published training
uses False: neither); ``cfg.ln_bias`` keeps the shifts alone ("tiny-lm" has them).

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

import math

from .. import backend
from ..backend.validate import check_array, check_params, check_token_ids
from ..nn import layers as L
from ..nn import block as Bk
from ..nn.params import tost_block_spec
from ..nn.params import sub, prefixed, num_params
from .configs import LMConfig

__all__ = ["lm_init", "lm_forward", "lm_backward", "lm_loss_and_grads", "lm_generate", "lm_spec"]


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


def lm_spec(cfg: LMConfig) -> dict:
    """{key: (shape, required)} of the parameters of ``cfg`` (as :func:`lm_init` makes them;
    linear biases and LayerNorm shifts optional)."""
    C, V = cfg.width, cfg.vocab_size
    spec = {"wte": ((V, C), True), "wpe": ((cfg.block_size, C), True)}
    block = tost_block_spec(C, cfg.num_heads, True, cfg.mixer, H=cfg.mlp_ratio * C,
                               max_len=cfg.block_size)
    for i in range(cfg.depth):
        spec.update({f"blocks.{i}.{k}": v for k, v in block.items()})
    spec.update({"ln_f.gamma": ((C,), True), "ln_f.beta": ((C,), False)})
    return spec


def _check_params(params, cfg):
    """The parameters must be those of ``cfg``, in one floating dtype (that of "wte")."""
    spec = lm_spec(cfg)
    wte = params.get("wte") if isinstance(params, dict) else None
    check_params(params, spec, getattr(wte, "dtype", None))


def lm_forward(ids, params: dict, cfg: LMConfig):
    """ids (B, T) integer -> (logits (B, T, V), cache).

    The door of the model: ``ids`` and ``params`` are checked here, once (one line naming the
    wrong argument or key); the layers below trust them.
    """
    spec = lm_spec(cfg)
    xp = check_token_ids(ids, "ids", cfg.vocab_size, cfg.block_size,
                         f"for W of shape (V, C) = {(cfg.vocab_size, cfg.width)}")
    wte = params.get("wte") if isinstance(params, dict) else None
    check_params(params, spec, getattr(wte, "dtype", None))
    return _forward(ids, params, cfg, xp)


def _forward(ids, params, cfg, xp):
    T = ids.shape[1]
    tok, c_emb = L._embedding_forward(ids, params["wte"])                 # (B, T, C)
    x = tok + params["wpe"][:T, :]
    c_blocks = []
    for i in range(cfg.depth):
        x, c = Bk._tost_block_forward(x, sub(params, f"blocks.{i}"), cfg.num_heads, True,
                                      cfg.ln_eps, cfg.gelu, cfg.mixer)
        c_blocks.append(c)
    h, c_ln = L._layer_norm_forward(x, params["ln_f.gamma"], params.get("ln_f.beta"), cfg.ln_eps)
    logits = L.rows_matmul(xp, h, xp.matrix_transpose(params["wte"]))      # (B, T, V)
    return logits, {"emb": c_emb, "blocks": c_blocks, "ln_f": c_ln, "h": h, "T": T,
                    "wte": params["wte"], "cfg": cfg}


def lm_backward(dlogits, cache) -> dict:
    """dlogits (B, T, V) -> grads (same keys as the parameters)."""
    check_array(dlogits, "dlogits", ndim=3, shape_desc="(B, T, V)")
    h, V = cache["h"], cache["wte"].shape[0]
    want = tuple(h.shape[:2]) + (V,)
    if tuple(dlogits.shape) != want or dlogits.dtype != h.dtype:
        raise ValueError(f"dlogits must have the logits' shape {want} and dtype {h.dtype}, "
                         f"got {dlogits.dtype} {tuple(dlogits.shape)}")
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
        dx, g = Bk._tost_block_backward(dx, cache["blocks"][i])
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
    with backend.backward_ahead():     # a training step: the backward follows
        logits, cache = lm_forward(ids, params, cfg)
    loss, c_loss = L.softmax_cross_entropy_forward(logits, targets)
    xp = backend.namespace(logits)
    dlogits, _ = L.softmax_cross_entropy_backward(xp.ones_like(loss), c_loss)
    return loss, _backward(dlogits, cache), logits


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
        self.states = [Bk._tost_block_decode_init(self.B, p, self.cfg.num_heads)
                       for p in self.blocks]
        self.t = 0

    def step(self, ids_t):
        """ids_t (B,) int -> logits (B, V) for the next token."""
        xp = backend.namespace(ids_t)
        cfg, p = self.cfg, self.params
        x = xp.take(p["wte"], backend.indices(ids_t), axis=0)            # (B, C)
        x = x + p["wpe"][self.t, :]
        for i, bp in enumerate(self.blocks):
            x, self.states[i] = Bk._tost_block_decode_step(self.states[i], x, bp, cfg.num_heads,
                                                           self.t, cfg.ln_eps, cfg.gelu)
        self.t += 1
        h, _ = L._layer_norm_forward(x, p["ln_f.gamma"], p.get("ln_f.beta"), cfg.ln_eps)
        return h @ xp.matrix_transpose(p["wte"])                           # (B, V)


def _pick(logits, temperature: float, top_k, rng):
    """Next token per row, on the logits' device (no host transfer per token).

    logits (B, V) -> (B,) int64. temperature 0 (or below the smallest normal number of the
    logits' dtype, 1.2e-38 in float32, where T itself would round to 0): greedy argmax.
    Otherwise softmax(logits / T)
    restricted to the top_k largest, sampled by inverse CDF with one uniform per row drawn from
    the seeded host RNG (so one seed gives the same draws on every backend). The largest logit
    is subtracted *before* dividing by T: the quotients are then <= 0 and a tiny T sends all but
    the largest to -inf (never inf - inf = NaN), so T -> 0 is the greedy continuation.
    """
    xp = backend.namespace(logits)
    if temperature < xp.finfo(logits.dtype).smallest_normal:   # 0, or not representable
        return xp.astype(xp.argmax(logits, axis=-1), xp.int64)    # in the logits' dtype

    B, V = logits.shape
    z = (logits - xp.max(logits, axis=-1, keepdims=True)) / temperature    # (B, V), <= 0
    if top_k is not None and top_k < V:
        kth = xp.sort(z, axis=-1)[:, V - top_k:V - top_k + 1]              # (B, 1)
        z = xp.where(z < kth, -xp.inf, z)
    z = z - xp.max(z, axis=-1, keepdims=True)
    pr = xp.exp(z)
    cdf = xp.cumulative_sum(pr / xp.sum(pr, axis=-1, keepdims=True), axis=-1)  # (B, V)
    u = rng.uniform(xp, (B, 1), logits.dtype, device=backend.device_of(logits))
    idx = xp.sum(xp.astype(cdf < u, xp.int64), axis=-1)                    # (B,)
    return xp.clip(idx, max=V - 1)


def _check_finite_logits(logits, xp) -> None:
    """Refuse to sample from NaN or infinite logits (weights that overflow float32 give them,
    and argmax would then print token 0 for ever). Checked once, after the prompt: one host
    transfer, not one per token."""
    if not bool(xp.all(xp.isfinite(logits))):
        raise ValueError("the model's logits after the prompt are not finite (NaN or inf): its "
                         "weights overflow the float range; nothing sampled")


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
    check_token_ids(prompt_ids, "prompt_ids", cfg.vocab_size)
    _check_params(params, cfg)
    try:
        t_ok = not isinstance(temperature, bool) and math.isfinite(float(temperature)) \
            and float(temperature) >= 0
    except (TypeError, ValueError):
        t_ok = False
    if not t_ok:
        raise ValueError(f"temperature must be a finite number >= 0, got {temperature!r}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be >= 1 or None, got {top_k}")
    if length < 0:
        raise ValueError(f"length must be >= 0, got {length}")
    rng = backend.RNG(seed)
    seq = xp.astype(prompt_ids, xp.int64)                                  # (B, T0)
    if length == 0:
        return seq
    if cfg.mixer != "tssa":
        # the baselines (and TSSA with a fixed Pi) have no recurrent decoder here: re-run the
        # forward over the last block_size tokens for every new token (O(T) per token or more)
        for i in range(length):
            logits, _ = _forward(seq[:, -cfg.block_size:], params, cfg, xp)
            if i == 0:
                _check_finite_logits(logits[:, -1, :], xp)
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
    _check_finite_logits(logits, xp)
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
