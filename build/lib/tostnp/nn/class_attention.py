"""Class attention (CaiT / XCiT): the CLS token is the only query, so pooling is O(N C).

:func:`class_attention_block_forward` is the residual block that the vision model stacks on top
of the ToST blocks, in two forms: "published" -- XCiT's block with ``tokens_norm=True``, as in
the published ToST models (the patch tokens are re-normalised and passed on) -- and "cls-only",
CaiT's variant that updates the class token alone. Block parameters (keys relative to the block):
"norm1.gamma", "norm1.beta", "attn.W_q", "attn.b_q", "attn.W_kv", "attn.b_kv", "attn.W_o",
"attn.b_o", "ls1.gamma", "norm2.gamma", "norm2.beta", "mlp.W1", "mlp.b1", "mlp.W2", "mlp.b2",
"ls2.gamma". Shapes: B batch, N patch tokens, C width, h heads, p = C / h.
"""
from __future__ import annotations

import math

from .. import backend
from .params import check_params, sub, prefixed
from . import layers as L
from .layers import linear_forward, linear_backward
from .attention import (_check_x_heads, _split, _merge, _rename, _softmax_core_forward,
                        _softmax_core_backward)

__all__ = ["class_attention_forward", "class_attention_backward",
           "class_attention_block_init", "class_attention_block_forward",
           "class_attention_block_backward"]


# ---------------------------------------------------------------------------------------------
# class attention (the CLS token is the only query)
# ---------------------------------------------------------------------------------------------
def class_attention_forward(x, params, num_heads):
    """Class attention: the CLS token (position 0) attends to all 1+N tokens; linear in N.

    x: (B, 1+N, C); params {"W_q": (C, C), "b_q": (C,) opt, "W_kv": (C, 2C), "b_kv": (2C,) opt,
    "W_o": (C, C), "b_o": (C,) opt}; W_kv produces [k | v]. -> y: (B, 1, C), the updated CLS.
    """
    xp = _check_x_heads(x, num_heads, "class_attention")
    B, M, C = x.shape
    if M < 1:
        raise ValueError("class_attention: x must have shape (B, 1+N, C) with the CLS token at "
                         f"position 0, got shape {tuple(x.shape)}")
    check_params(params, {"W_q": ((C, C), True), "b_q": ((C,), False),
                          "W_kv": ((C, 2 * C), True), "b_kv": ((2 * C,), False),
                          "W_o": ((C, C), True), "b_o": ((C,), False)}, x.dtype, "class_attention")
    h = num_heads
    scale = 1.0 / math.sqrt(C // h)
    q, c_q = linear_forward(x[:, 0:1, :], params["W_q"], params.get("b_q"))   # (B, 1, C)
    kv, c_kv = linear_forward(x, params["W_kv"], params.get("b_kv"))          # (B, 1+N, 2C)
    qs = _split(xp, q, 1, h)[0, ...] * scale                       # (B, h, 1, p)
    a = _split(xp, kv, 2, h)                                       # (2, B, h, 1+N, p)
    k, v = a[0, ...], a[1, ...]
    o, A = _softmax_core_forward(xp, qs, k, v, causal=False)       # (B, h, 1, p); A (B, h, 1, 1+N)
    y, c_o = linear_forward(_merge(xp, [o]), params["W_o"], params.get("b_o"))  # (B, 1, C)
    return y, (c_q, c_kv, c_o, qs, k, v, A, o, scale)


def class_attention_backward(dy, cache):
    """dy: (B, 1, C) -> dx (B, 1+N, C), grads with the keys of params."""
    c_q, c_kv, c_o, qs, k, v, A, o, scale = cache
    xp = backend.namespace(dy)
    h = qs.shape[1]
    dom, g_o = linear_backward(dy, c_o)                            # (B, 1, C)
    dO = _split(xp, dom, 1, h)[0, ...]                             # (B, h, 1, p)
    dqs, dk, dv = _softmax_core_backward(xp, dO, qs, k, v, A, o)
    dx0, g_q = linear_backward(_merge(xp, [dqs * scale]), c_q)     # (B, 1, C)
    dx, g_kv = linear_backward(_merge(xp, [dk, dv]), c_kv)         # (B, 1+N, C)
    dx = xp.concat([dx[:, 0:1, :] + dx0, dx[:, 1:, :]], axis=1)    # the CLS row is also the query
    grads = _rename(g_q, "q")
    grads.update(_rename(g_kv, "kv"))
    grads.update(_rename(g_o, "o"))
    return dx, grads


# ---------------------------------------------------------------------------------------------
# the class-attention block
# ---------------------------------------------------------------------------------------------
def class_attention_block_init(rng, xp, C: int, *, mlp_ratio: int, layer_scale_init: float,
                               dtype, device=None, std: float = 0.02) -> dict:
    """One class-attention block: weights N(0, std^2), biases 0, norms 1/0, LayerScale gammas
    ``layer_scale_init``; MLP hidden width mlp_ratio * C. Keys as in the module docstring."""
    H = mlp_ratio * C
    z = lambda *s: xp.zeros(s, dtype=dtype, device=device)  # noqa: E731
    o = lambda *s: xp.ones(s, dtype=dtype, device=device)   # noqa: E731
    normal = lambda *s: rng.normal(xp, s, dtype, std=std, device=device)  # noqa: E731
    return {
        "norm1.gamma": o(C), "norm1.beta": z(C),
        "attn.W_q": normal(C, C), "attn.b_q": z(C),
        "attn.W_kv": normal(C, 2 * C), "attn.b_kv": z(2 * C),
        "attn.W_o": normal(C, C), "attn.b_o": z(C),
        "ls1.gamma": xp.full((C,), layer_scale_init, dtype=dtype, device=device),
        "norm2.gamma": o(C), "norm2.beta": z(C),
        "mlp.W1": normal(C, H), "mlp.b1": z(H),
        "mlp.W2": normal(H, C), "mlp.b2": z(C),
        "ls2.gamma": xp.full((C,), layer_scale_init, dtype=dtype, device=device),
    }


def class_attention_block_forward(cls, tokens, params, num_heads: int, ln_eps: float, *,
                                  form: str = "published", gelu: str = "tanh"):
    """cls (B, 1, C), tokens (B, N, C) -> (new cls (B, 1, C), new tokens (B, N, C), cache).

    form "published" (XCiT with tokens_norm=True, the block of the published ToST models)::

        u = [cls; tokens],   un = LN1(u)                                   # (B, 1+N, C)
        x = u + gamma1 * [ClassAttention(un); un_patches]                  # patches re-normalised
        y = LN2(x)                                                         # all tokens
        out = y + [gamma2 * MLP(y_cls); y_patches]

    so the class token becomes LN2(c) + gamma2 MLP(LN2(c)) with c = cls + gamma1 CA, and each
    patch token 2 LN2(t + gamma1 LN1(t)) -- the next block sees those patch tokens.

    form "cls-only" (CaiT's block): cls + gamma1 CA(LN1(u)), then cls + gamma2 MLP(LN2(cls));
    the patch tokens pass unchanged. ``gelu``: the MLP's GELU ("tanh" or "erf").
    """
    if form not in ("published", "cls-only"):
        raise ValueError(f"form must be 'published' or 'cls-only', got {form!r}")
    xp = backend.namespace(tokens)
    p = params
    u = xp.concat([cls, tokens], axis=1)                                   # (B, 1+N, C)
    un, c_n1 = L.layer_norm_forward(u, p["norm1.gamma"], p["norm1.beta"], ln_eps)
    a, c_att = class_attention_forward(un, sub(p, "attn"), num_heads)      # (B, 1, C)
    if form == "published":
        z, c_ls1 = L.layer_scale_forward(xp.concat([a, un[:, 1:, :]], axis=1), p["ls1.gamma"])
        y, c_n2 = L.layer_norm_forward(u + z, p["norm2.gamma"], p["norm2.beta"], ln_eps)
        hn, new_tokens = y[:, :1, :], 2.0 * y[:, 1:, :]                    # (B, 1, C), (B, N, C)
        res = hn
    else:
        a, c_ls1 = L.layer_scale_forward(a, p["ls1.gamma"])
        res = cls + a                                                      # (B, 1, C)
        hn, c_n2 = L.layer_norm_forward(res, p["norm2.gamma"], p["norm2.beta"], ln_eps)
        new_tokens = tokens
    m, c_mlp = L.mlp_forward(hn, sub(p, "mlp"), gelu=gelu)                 # (B, 1, C)
    m, c_ls2 = L.layer_scale_forward(m, p["ls2.gamma"])
    cache = (form, c_n1, c_att, c_ls1, c_n2, c_mlp, c_ls2, tuple(tokens.shape))
    return res + m, new_tokens, cache


def class_attention_block_backward(dcls, dtokens, cache):
    """dcls (B, 1, C), dtokens (B, N, C) or None (when the block's output tokens are unused)
    -> (dcls_in (B, 1, C), dtokens_in (B, N, C), grads with the block's keys)."""
    form, c_n1, c_att, c_ls1, c_n2, c_mlp, c_ls2, tok_shape = cache
    xp = backend.namespace(dcls)
    g = {}
    dm, gg = L.layer_scale_backward(dcls, c_ls2)
    g["ls2.gamma"] = gg["gamma"]
    dhn, gg = L.mlp_backward(dm, c_mlp)
    g.update(prefixed(gg, "mlp"))
    if form == "published":
        dy_cls = dhn + dcls                                                # (B, 1, C)
        dy_tok = (xp.zeros(tok_shape, dtype=dcls.dtype, device=backend.device_of(dcls))
                  if dtokens is None else 2.0 * dtokens)
        dx, gg = L.layer_norm_backward(xp.concat([dy_cls, dy_tok], axis=1), c_n2)
        g["norm2.gamma"], g["norm2.beta"] = gg["gamma"], gg["beta"]
        dz, gg = L.layer_scale_backward(dx, c_ls1)                         # x = u + z
        g["ls1.gamma"] = gg["gamma"]
        dun, gg = class_attention_backward(dz[:, :1, :], c_att)            # (B, 1+N, C)
        dun = dun + xp.concat([xp.zeros_like(dz[:, :1, :]), dz[:, 1:, :]], axis=1)
        du_res = dx                                                        # residual
    else:
        dc, gg = L.layer_norm_backward(dhn, c_n2)
        g["norm2.gamma"], g["norm2.beta"] = gg["gamma"], gg["beta"]
        dres = dcls + dc                                                   # residual 2
        da, gg = L.layer_scale_backward(dres, c_ls1)
        g["ls1.gamma"] = gg["gamma"]
        dun, gg = class_attention_backward(da, c_att)
        zeros = xp.zeros(tok_shape, dtype=dcls.dtype, device=backend.device_of(dcls))
        du_res = xp.concat([dres, zeros if dtokens is None else dtokens], axis=1)  # residual 1
    g.update(prefixed(gg, "attn"))
    du, gg = L.layer_norm_backward(dun, c_n1)
    g["norm1.gamma"], g["norm1.beta"] = gg["gamma"], gg["beta"]
    du = du + du_res
    return du[:, :1, :], du[:, 1:, :], g
