"""The 3x3 convolution with stride 2, padding 1 and no bias: one stage of the convolutional
patch stem of the published ToST vision models (XCiT's stem).

Images are channels-last, like every tostnp vision input: x (B, H, W, Cin). The kernel is
stored (kh, kw, Cin, Cout) so that, like a linear layer's (in, out) weight, the layer is one
matrix product once the 3x3 neighbourhoods are laid side by side ("im2col"):

    cols[b, r, c, (i, j, ci)] = xpad[b, 2r + i, 2c + j, ci]        i, j in {0, 1, 2}
    y = cols @ reshape(W, (9 Cin, Cout))                             y: (B, Ho, Wo, Cout)

with xpad the input framed by one row/column of zeros, Ho = ceil(H/2), Wo = ceil(W/2).
A cross-correlation (no kernel flip), as in PyTorch's Conv2d; its (Cout, Cin, kh, kw) weight is
this one transposed by (3, 2, 0, 1) -- :mod:`tostnp.io.interchange` does that.

The backward is the same gather run in reverse: dW = cols^T dy, and d cols is scattered back
onto the padded grid, each input pixel summing over the (up to 4) windows that contain it.
"""
from __future__ import annotations

from .. import backend
from ..backend.validate import check_array
from .params import check_param
from .layers import rows_matmul

__all__ = ["conv3x3s2_forward", "conv3x3s2_backward"]


def _pad1(xp, x):
    """(B, H, W, C) -> (B, H+2, W+2, C) framed by zeros (the Array API has no pad)."""
    B, H, W, C = x.shape
    dev = backend.device_of(x)
    zr = xp.zeros((B, 1, W, C), dtype=x.dtype, device=dev)
    x = xp.concat([zr, x, zr], axis=1)                              # (B, H+2, W, C)
    zc = xp.zeros((B, H + 2, 1, C), dtype=x.dtype, device=dev)
    return xp.concat([zc, x, zc], axis=2)                           # (B, H+2, W+2, C)


def conv3x3s2_forward(x, W):
    """y = conv(x, W), kernel 3x3, stride 2, padding 1, no bias.

    x: (B, H, W, Cin); W: (3, 3, Cin, Cout) -> y: (B, ceil(H/2), ceil(W/2), Cout).
    """
    xp = check_array(x, "x", ndim=4, shape_desc="(B, H, W, Cin)")
    B, H, Wd, Cin = x.shape
    check_array(W, "W", ndim=4, shape_desc=f"(3, 3, {Cin}, Cout)")
    check_param(W, "W", (3, 3, Cin, W.shape[3]), x.dtype)
    Ho, Wo = (H + 1) // 2, (Wd + 1) // 2
    xpad = _pad1(xp, x)                                             # (B, H+2, W+2, Cin)
    cols = xp.concat([xpad[:, i:i + 2 * Ho - 1:2, j:j + 2 * Wo - 1:2, :]
                      for i in range(3) for j in range(3)], axis=-1)  # (B, Ho, Wo, 9 Cin)
    W2 = xp.reshape(W, (9 * Cin, W.shape[3]))                       # (9 Cin, Cout)
    y = rows_matmul(xp, cols, W2)                                   # (B, Ho, Wo, Cout)
    return y, (cols, W2, tuple(W.shape), tuple(x.shape))


def conv3x3s2_backward(dy, cache, need_dx: bool = True):
    """dy: (B, Ho, Wo, Cout) -> dx (B, H, W, Cin), {"W": (3, 3, Cin, Cout)}.

    ``need_dx=False`` skips dx (None): the first stage of a stem has no input gradient to pass.
    """
    cols, W2, w_shape, x_shape = cache
    xp = backend.namespace(dy)
    B, H, Wd, Cin = x_shape
    Ho, Wo, Cout = dy.shape[1], dy.shape[2], dy.shape[3]
    dW = xp.matrix_transpose(xp.reshape(cols, (-1, 9 * Cin))) @ xp.reshape(dy, (-1, Cout))
    if not need_dx:
        return None, {"W": xp.reshape(dW, w_shape)}
    dcols = rows_matmul(xp, dy, xp.matrix_transpose(W2))            # (B, Ho, Wo, 9 Cin)
    dxpad = xp.zeros((B, H + 2, Wd + 2, Cin), dtype=dy.dtype, device=backend.device_of(dy))
    for i in range(3):
        for j in range(3):
            k = (3 * i + j) * Cin
            rows, cs = slice(i, i + 2 * Ho - 1, 2), slice(j, j + 2 * Wo - 1, 2)
            # the 9 strided windows overlap, so add (never assign)
            dxpad[:, rows, cs, :] = dxpad[:, rows, cs, :] + dcols[..., k:k + Cin]
    return dxpad[:, 1:H + 1, 1:Wd + 1, :], {"W": xp.reshape(dW, w_shape)}
