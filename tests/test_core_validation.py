"""Bad input to the core functions raises a clear TypeError/ValueError naming the argument.

Nothing may return NaN silently: wrong types, ranks, shapes, dtypes, memberships off the
simplex, non-positive or non-finite eps/tau/eta, NaN/Inf in the data and empty inputs all raise.
"""
import numpy as np
import pytest

import tostnp

EPS, TAU, ETA = 0.7, 0.1, 0.5


def data(n=5, d=4, K=3, p=2, dtype=np.float64):
    rng = np.random.default_rng(0)
    Z = rng.standard_normal((n, d)).astype(dtype)              # (n, d)
    Pi = rng.dirichlet(np.ones(K), size=n).astype(dtype)        # (n, K)
    U = np.linalg.qr(rng.standard_normal((K, d, d)))[0][:, :, :p].astype(dtype)   # (K, d, p)
    return Z, Pi, U


# every core function as f(Z, Pi, U, eps, tau, eta)
ALL = {
    "coding_rate": lambda Z, Pi, U, eps=EPS, tau=TAU, eta=ETA: tostnp.coding_rate(Z, eps),
    "compression": lambda Z, Pi, U, eps=EPS, tau=TAU, eta=ETA: tostnp.compression(Z, Pi, eps),
    "rate_reduction": lambda Z, Pi, U, eps=EPS, tau=TAU, eta=ETA: tostnp.rate_reduction(Z, Pi, eps),
    "variational_compression":
        lambda Z, Pi, U, eps=EPS, tau=TAU, eta=ETA: tostnp.variational_compression(Z, Pi, U, eps),
    "variational_compression_grad":
        lambda Z, Pi, U, eps=EPS, tau=TAU, eta=ETA: tostnp.variational_compression_grad(Z, Pi, U, eps),
    "tssa_step": lambda Z, Pi, U, eps=EPS, tau=TAU, eta=ETA: tostnp.tssa_step(Z, Pi, U, eps, tau),
    "membership": lambda Z, Pi, U, eps=EPS, tau=TAU, eta=ETA: tostnp.membership(Z, U, eta),
}
WITH_PI = [k for k in ALL if k not in ("coding_rate", "membership")]
WITH_U = ["variational_compression", "variational_compression_grad", "tssa_step", "membership"]
WITH_EPS = [k for k in ALL if k != "membership"]


@pytest.mark.parametrize("name", ALL)
def test_valid_input_gives_finite_result(name):
    assert np.all(np.isfinite(ALL[name](*data())))


# ----- Z ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("bad", [[[1.0, 2.0]], 3.0, np.ones((5, 4), dtype=np.int64)],
                         ids=["list", "float", "int-array"])
def test_Z_not_floating_array(name, bad):
    _, Pi, U = data()
    with pytest.raises(TypeError, match="Z"):
        ALL[name](bad, Pi, U)


@pytest.mark.parametrize("name", ALL)
def test_Z_wrong_rank(name):
    _, Pi, U = data()
    with pytest.raises(ValueError, match=r"Z .*\(\.\.\., n, d\)"):
        ALL[name](np.ones(4), Pi, U)


@pytest.mark.parametrize("name", ALL)
def test_Z_no_tokens(name):
    _, Pi, U = data()
    with pytest.raises(ValueError, match="Z"):
        ALL[name](np.ones((0, 4)), Pi[:0], U)


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_Z_not_finite(name, value):
    Z, Pi, U = data()
    Z[2, 1] = value
    with pytest.raises(ValueError, match="Z contains NaN or Inf"):
        ALL[name](Z, Pi, U)


# ----- Pi -----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", WITH_PI)
def test_Pi_wrong_number_of_tokens(name):
    Z, Pi, U = data()
    with pytest.raises(ValueError, match=r"Pi must have shape \(5, 'K'\)"):
        ALL[name](Z, Pi[:4], U)


@pytest.mark.parametrize("name", WITH_PI)
def test_Pi_leading_axes_differ(name):
    Z, Pi, U = data()
    with pytest.raises(ValueError, match="Pi must have shape"):
        ALL[name](np.stack([Z, Z]), Pi, U)


@pytest.mark.parametrize("name", WITH_PI)
def test_Pi_rows_not_on_simplex(name):
    Z, Pi, U = data()
    with pytest.raises(ValueError, match="Pi .*sum to 1"):
        ALL[name](Z, 2.0 * Pi, U)
    neg = Pi.copy()
    neg[0] = [1.5, -0.5, 0.0]                                   # sums to 1 but negative
    with pytest.raises(ValueError, match="Pi must be non-negative"):
        ALL[name](Z, neg, U)
    nan = Pi.copy()
    nan[1, 1] = np.nan
    with pytest.raises(ValueError, match="Pi contains NaN"):
        ALL[name](Z, nan, U)


@pytest.mark.parametrize("name", WITH_PI)
def test_Pi_dtype_differs(name):
    Z, Pi, U = data()
    with pytest.raises(TypeError, match="Pi has dtype float32"):
        ALL[name](Z, Pi.astype(np.float32), U)


def test_Pi_roundoff_is_accepted():
    # float32 softmax round-off, and float32 memberships cast to float64, are valid.
    rng = np.random.default_rng(1)
    Z = rng.standard_normal((6, 4))
    Pi32 = rng.dirichlet(np.ones(64), size=6).astype(np.float32)   # (6, 64)
    assert np.isfinite(tostnp.compression(Z.astype(np.float32), Pi32, EPS))
    assert np.isfinite(tostnp.compression(Z, Pi32.astype(np.float64), EPS))


# ----- U ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", WITH_U)
def test_U_not_3d(name):
    Z, Pi, U = data()
    with pytest.raises(ValueError, match=r"U must have 3 dimensions.*\(K, d, p\)"):
        ALL[name](Z, Pi, U[0])


@pytest.mark.parametrize("name", WITH_U)
def test_U_wrong_width(name):
    Z, Pi, U = data()
    with pytest.raises(ValueError, match=r"U must have shape \(K, d, p\) with d = 4"):
        ALL[name](Z, Pi, U[:, :3, :])


@pytest.mark.parametrize("name", ["variational_compression", "variational_compression_grad",
                                  "tssa_step"])
def test_U_groups_differ_from_Pi(name):
    Z, Pi, U = data()
    with pytest.raises(ValueError, match=r"U must have shape \(K, d, p\) with K = 3"):
        ALL[name](Z, Pi, U[:2])


@pytest.mark.parametrize("name", WITH_U)
def test_U_dtype_differs(name):
    Z, Pi, U = data(dtype=np.float32)
    with pytest.raises(TypeError, match="U has dtype float64"):
        ALL[name](Z, Pi, U.astype(np.float64))


@pytest.mark.parametrize("name", WITH_U)
def test_U_not_finite(name):
    Z, Pi, U = data()
    U[0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="U contains NaN"):
        ALL[name](Z, Pi, U)


# ----- eps, tau, eta ------------------------------------------------------------------------
BAD_SCALARS = [0.0, -1.0, float("nan"), float("inf")]


@pytest.mark.parametrize("name", WITH_EPS)
@pytest.mark.parametrize("eps", BAD_SCALARS)
def test_eps_not_positive_finite(name, eps):
    with pytest.raises(ValueError, match="eps must be a positive finite number"):
        ALL[name](*data(), eps=eps)


@pytest.mark.parametrize("tau", BAD_SCALARS)
def test_tau_not_positive_finite(tau):
    with pytest.raises(ValueError, match="tau must be a positive finite number"):
        ALL["tssa_step"](*data(), tau=tau)


@pytest.mark.parametrize("eta", BAD_SCALARS)
def test_eta_not_positive_finite(eta):
    with pytest.raises(ValueError, match="eta must be a positive finite number"):
        ALL["membership"](*data(), eta=eta)


def test_scalar_of_wrong_type():
    with pytest.raises(TypeError, match="eps"):
        tostnp.coding_rate(data()[0], None)
