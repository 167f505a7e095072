"""Peak memory of the TSSA forms, as the book promises it: tracemalloc (NumPy reports its
buffers to it) counts every byte allocated during the call, deterministically.

* ``tssa_step`` needs O(n K p) memory (book/05_gradient_tssa.md, "Token statistics, not token
  pairs"): with K p = d its peak stays below 4 times the size of Z -- no (K, n, d) array.
* The TSSA layer's forward and backward together stay below 8 times the size of its input,
  causal (prefix sums) or not.

Every array involved scales with n, so the ratios at these small shapes are those of large
ones (n = 20,000 or N = 8,192 give the same bounds; benchmarks/context_scaling.py measures
whole training steps).
"""
import numpy as np
import pytest

from tostnp import tssa_step
from tostnp.bench.peaks import traced_peak_bytes as peak_bytes   # above what existed before
from tostnp.nn.tssa import tssa_forward, tssa_backward


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tssa_step_peak_is_below_four_times_Z(dtype):
    rng = np.random.default_rng(0)
    n, d, K, p = 4000, 64, 8, 8
    Z = rng.standard_normal((n, d)).astype(dtype)
    U = np.linalg.qr(rng.standard_normal((K, d, p)))[0].astype(dtype)
    Pi = rng.dirichlet(np.ones(K), size=n).astype(dtype)
    ratio = peak_bytes(lambda: tssa_step(Z, Pi, U, 1.0, 0.1)) / Z.nbytes
    # a (K, n, d) array alone would be K = 8 times Z
    assert ratio <= 4.0, f"tssa_step's peak is {ratio:.2f} times the size of Z"


@pytest.mark.parametrize("causal", [False, True])
def test_tssa_layer_forward_backward_peak_is_below_eight_times_x(causal):
    rng = np.random.default_rng(1)
    B, N, C, h = 1, 2048, 96, 6
    dt = np.float32
    x = rng.standard_normal((B, N, C)).astype(dt)
    dy = rng.standard_normal((B, N, C)).astype(dt)
    P = {"W_u": (0.1 * rng.standard_normal((C, C))).astype(dt), "b_u": np.zeros(C, dt),
         "temp": np.ones((h, 1), dt), "W_o": (0.1 * rng.standard_normal((C, C))).astype(dt),
         "b_o": np.zeros(C, dt), "denom_bias": np.zeros((h, N, 1), dt)}

    def forward_backward():
        y, cache = tssa_forward(x, P, h, causal=causal)
        return y, tssa_backward(dy, cache)

    # once first: where Numba is installed, the first call compiles the causal layer's loops
    # (tostnp.backend.compiled), and the compiler's own Python objects are no array of the layer
    forward_backward()
    ratio = peak_bytes(forward_backward) / x.nbytes
    assert ratio <= 8.0, f"the {'causal' if causal else 'non-causal'} layer's peak is {ratio:.2f} x"
