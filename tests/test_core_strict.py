"""Every core function on array_api_strict arrays on Device("device1") -- and on CuPy where a
GPU is usable (the ``device`` fixture, tests/devices.py) -- matches NumPy.

array_api_strict raises on host conversion, on mixing devices and on any non-standard call,
so this is the CuPy (GPU) code path tested without a GPU. The result must stay on device1 and
keep the input dtype.
"""
import numpy as np
import pytest

import tostnp
from tostnp.backend import to_host


EPS, TAU, ETA = 0.7, 0.1, 0.5

CASES = [
    ("coding_rate", lambda Z, Pi, U: (Z, EPS)),
    ("compression", lambda Z, Pi, U: (Z, Pi, EPS)),
    ("rate_reduction", lambda Z, Pi, U: (Z, Pi, EPS)),
    ("variational_compression", lambda Z, Pi, U: (Z, Pi, U, EPS)),
    ("variational_compression_grad", lambda Z, Pi, U: (Z, Pi, U, EPS)),
    ("tssa_step", lambda Z, Pi, U: (Z, Pi, U, EPS, TAU)),
    ("membership", lambda Z, Pi, U: (Z, U, ETA)),
]


def host_data(n, d):
    rng = np.random.default_rng(0)
    Z = rng.standard_normal((2, n, d))                          # (B, n, d)
    Pi = rng.dirichlet(np.ones(3), size=(2, n))                 # (B, n, K)
    U = np.linalg.qr(rng.standard_normal((3, d, d)))[0][:, :, :2]   # (K, d, p)
    return Z, Pi, U


@pytest.mark.parametrize("n,d", [(4, 6), (7, 3)])                # both Gram branches
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name,args", CASES, ids=[c[0] for c in CASES])
def test_strict_device_matches_numpy(name, args, dtype, n, d, device):
    fn = getattr(tostnp, name)
    host = [a.astype(dtype) for a in host_data(n, d)]
    on_device = [device.put(a, dtype) for a in host]
    out = fn(*args(*on_device))
    want = fn(*args(*host))
    assert device.holds(out)
    assert out.dtype == device.dtype(dtype)
    got = to_host(out)                                          # explicit transfer
    tol = 1e-5 if dtype == "float32" else 1e-12
    assert np.allclose(got, want, rtol=tol, atol=tol)
