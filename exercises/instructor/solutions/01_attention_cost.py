"""Reference solutions of exercises/01_attention_cost.md, one section per cell tagged ex-<name>."""
# %% ex-softmax_attention
import numpy as np


def softmax_attention_mine(Q, K, V):
    """Q, K (N, d), V (N, d_v) -> (N, d_v); scores shifted by their row max before exp."""
    S = Q @ K.T / np.sqrt(Q.shape[1])                      # (N, N)
    A = np.exp(S - S.max(axis=1, keepdims=True))
    return (A / A.sum(axis=1, keepdims=True)) @ V


# %% ex-loglog_slope
import numpy as np


def loglog_slope_mine(Ns, times):
    """Least squares on (log N, log t)."""
    x, y = np.log(np.asarray(Ns, float)), np.log(np.asarray(times, float))
    xc = x - x.mean()
    return float(xc @ (y - y.mean()) / (xc @ xc))


# %% ex-attention_scaling
import time
import numpy as np
from threadpoolctl import threadpool_limits


def attention_scaling_mine():
    """Best of 3 timings per size, d = 64, one BLAS thread (less noise on a shared machine).
    N up to 2048: in the browser NumPy has no BLAS, and at N = 4096 its product A @ V leaves
    the cache and grows faster than N^2 (the check then measures an exponent near 3)."""
    rng = np.random.default_rng(0)
    Ns, secs = [256, 512, 1024, 2048], []
    for N in Ns:
        Q, K, V = (rng.standard_normal((N, 64)) for _ in range(3))
        best = np.inf
        for _ in range(3):
            with threadpool_limits(limits=1):
                t0 = time.perf_counter()
                softmax_attention_mine(Q, K, V)
                best = min(best, time.perf_counter() - t0)
        secs.append(best)
    return {"N": Ns, "seconds": secs, "slope": loglog_slope_mine(Ns, secs)}
