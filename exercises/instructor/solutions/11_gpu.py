"""Reference solutions of exercises/11_gpu.md, one section per cell tagged ex-<name>."""
# %% ex-xp_coding_rate
import array_api_compat


def xp_coding_rate_mine(Z, eps):
    xp = array_api_compat.array_namespace(Z)
    n, d = Z.shape
    G = xp.eye(d, dtype=Z.dtype, device=Z.device) + (d / (n * eps**2)) * (xp.matrix_transpose(Z) @ Z)
    return 0.5 * xp.linalg.slogdet(G)[1]


# %% ex-xp_softmax
import array_api_compat


def xp_softmax_mine(l):
    xp = array_api_compat.array_namespace(l)
    e = xp.exp(l - xp.max(l, axis=-1, keepdims=True))
    return e / xp.sum(e, axis=-1, keepdims=True)
