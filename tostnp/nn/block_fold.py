r"""The ToST block on the NumPy fast path: its LayerNorms' scale and shift and its LayerScales
folded into the matrix products next to them.

A LayerNorm followed by a linear map, and a linear map followed by a LayerScale, are each one
linear map of the standardised input::

    (xhat gamma + beta) @ W + b  =  xhat @ (diag(gamma) W) + (beta @ W + b)      LN, then linear
    (z @ W + b) s                =  z @ (W diag(s)) + b s                        linear, then LS

So the block (:mod:`tostnp.nn.block`) runs its mixer on xhat1 with W_in' = diag(gamma1) W_in,
b_in' = beta1 W_in + b_in, W_o' = W_o diag(ls1), b_o' = b_o ls1 (W_in is "W_u" of TSSA or
"W_qkv" of attention) and its MLP on xhat2 with W1', b1', W2', b2' made the same way. The
folded weights are weight-sized (C x C, C x H); what goes away are passes over the (B, N, C)
activations: the LayerNorms' y = xhat gamma + beta and the LayerScales' products forward; their
dy gamma, dy s and the two sums of dy xhat, dy z backward; and the arrays they wrote.

The gradients of the block's own parameters come from those of the folded ones (G' = dLoss/dW',
g' = dLoss/db'), weight-sized work::

    dW_in = diag(gamma) G_in' + beta^T g_in'    dgamma = rowsum(W_in * G_in')    dbeta = W_in g_in'
    db_in = g_in'
    dW_o  = G_o' diag(s)                        ds = colsum(W_o * G_o') + b_o * g_o'
    db_o  = g_o' s

and the LayerNorm's input gradient starts from dLoss/dxhat (the mixer's or the MLP's input
gradient) instead of dy gamma. :func:`tostnp.nn.block.tost_block_forward` runs this form where
``backend.fused`` hands out the fast kernels; the plain form is the specification, and
tests/test_block.py checks this one against it in float64.
"""
from __future__ import annotations

from ..backend import namespace
from .params import sub, prefixed
from .layers import _layer_norm_forward, layer_norm_backward, _mlp_forward, mlp_backward
from .mixers import _mixer_forward, mixer_backward

__all__ = ["folded_forward", "folded_backward"]

# (input weight, its bias, output weight, its bias) of each part of the block
_KEYS = {"tssa": ("W_u", "b_u", "W_o", "b_o"), "attn": ("W_qkv", "b_qkv", "W_o", "b_o"),
         "mlp": ("W1", "b1", "W2", "b2")}


def _fold(xp, P, keys, gamma, beta, s):
    """The part's parameters P with the LayerNorm (gamma, beta or None) before it and the
    LayerScale s after it folded in (a new dict; P is not changed)."""
    w_in, b_in, w_out, b_out = keys
    Q = dict(P)
    Q[w_in] = xp.reshape(gamma, (-1, 1)) * P[w_in]
    if beta is not None:
        shift = beta @ P[w_in]
        Q[b_in] = shift + P[b_in] if b_in in P else shift
    Q[w_out] = P[w_out] * s
    if b_out in P:
        Q[b_out] = P[b_out] * s
    return Q


def _unfold(xp, G, P, keys, gamma, beta, s):
    """(grads of P's keys, dgamma, dbeta or None, ds) from G, the gradients of the folded
    parameters (:func:`_fold`)."""
    w_in, b_in, w_out, b_out = keys
    grads = dict(G)
    G_in, G_out = G[w_in], G[w_out]
    grads[w_in] = xp.reshape(gamma, (-1, 1)) * G_in
    dgamma = xp.vecdot(P[w_in], G_in)                    # row by row, no W-sized temporary
    dbeta = None
    if beta is not None:
        g_in = grads.pop(b_in)
        grads[w_in] += xp.reshape(beta, (-1, 1)) * g_in
        dbeta = P[w_in] @ g_in
        if b_in in P:
            grads[b_in] = g_in
    grads[w_out] = G_out * s
    ds = xp.sum(P[w_out] * G_out, axis=0)
    if b_out in P:
        ds += P[b_out] * G[b_out]
        grads[b_out] = G[b_out] * s
    return grads, dgamma, dbeta, ds


def folded_forward(x, params, num_heads: int, causal: bool, ln_eps: float, gelu: str,
                   mixer: str, pre: str):
    """The block's forward with the folds above -> (y, cache) for :func:`folded_backward`."""
    xp = namespace(x)
    beta1, beta2 = params.get("ln1.beta"), params.get("ln2.beta")
    Q_mix = _fold(xp, sub(params, pre), _KEYS[pre], params["ln1.gamma"], beta1,
                  params["ls1.gamma"])
    Q_mlp = _fold(xp, sub(params, "mlp"), _KEYS["mlp"], params["ln2.gamma"], beta2,
                  params["ls2.gamma"])
    # the mixer and the MLP return fresh arrays that their caches do not hold: added to in place
    xhat1, c_ln1 = _layer_norm_forward(x, None, None, ln_eps)             # no scale, no shift
    t, c_mix = _mixer_forward(mixer, xhat1, Q_mix, num_heads, causal)     # ls1 * mixer(LN1(x))
    t += x
    x1 = t                                                                # residual 1
    xhat2, c_ln2 = _layer_norm_forward(x1, None, None, ln_eps)
    m, c_mlp = _mlp_forward(xhat2, Q_mlp, gelu)                           # ls2 * MLP(LN2(x1))
    m += x1
    cache = {"folded": True, "mixer": c_mix, "mlp": c_mlp, "ln1": c_ln1,
             "ln2": c_ln2, "params": params, "shape": tuple(x.shape),
             "Pi": c_mix["Pi"], "prefix": pre}
    if causal and c_mix["decode_state"] is not None:
        cache["decode_state"] = {"tssa": c_mix["decode_state"]}
    return m, cache


def folded_backward(dy, cache):
    """dy: (B, N, C) -> dx (B, N, C), grads with the block's dotted keys."""
    xp = namespace(dy)
    params, pre = cache["params"], cache["prefix"]
    beta1, beta2 = params.get("ln1.beta"), params.get("ln2.beta")
    grads = {}
    dxhat2, G = mlp_backward(dy, cache["mlp"])
    g, dgamma, dbeta, ds = _unfold(xp, G, sub(params, "mlp"), _KEYS["mlp"],
                                   params["ln2.gamma"], beta2, params["ls2.gamma"])
    grads.update(prefixed(g, "mlp"))
    grads["ln2.gamma"], grads["ls2.gamma"] = dgamma, ds
    if beta2 is not None:
        grads["ln2.beta"] = dbeta
    dx1, _ = layer_norm_backward(dxhat2, cache["ln2"])
    dx1 += dy                                                             # residual 2
    dxhat1, G = mixer_backward(dx1, cache["mixer"])
    g, dgamma, dbeta, ds = _unfold(xp, G, sub(params, pre), _KEYS[pre],
                                   params["ln1.gamma"], beta1, params["ls1.gamma"])
    grads.update(prefixed(g, pre))
    grads["ln1.gamma"], grads["ls1.gamma"] = dgamma, ds
    if beta1 is not None:
        grads["ln1.beta"] = dbeta
    dx, _ = layer_norm_backward(dxhat1, cache["ln1"])
    dx += dx1                                                             # residual 1
    return dx, grads
