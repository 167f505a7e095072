"""OpenBLAS's spin (tostnp.backend.openblas): set by importing tostnp before NumPy, asked for
only of NumPy's own OpenBLAS, and a NumPy-only environment without threadpoolctl runs the TSSA
layer whole."""
import numpy as np

from tostnp.backend import kernels, tuning


def test_openblas_spin_is_set_only_before_numpy():
    """Imported before NumPy, tostnp shortens OpenBLAS's spin (unless the variable is set);
    imported after NumPy it changes nothing and reports the spin as long."""
    import os
    import subprocess
    import sys
    probe = ("import os, sys\n{first}\nimport tostnp\nfrom tostnp.backend import openblas\n"
             "print(os.environ.get('OPENBLAS_THREAD_TIMEOUT'), openblas.spin_is_short())")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}

    def run(first, **extra):
        out = subprocess.run([sys.executable, "-c", probe.format(first=first)], env={**env, **extra},
                             capture_output=True, text=True, check=True)
        return out.stdout.split()
    assert run("") == ["22", "True"]
    assert run("import numpy") == ["None", "False"]
    assert run("", OPENBLAS_THREAD_TIMEOUT="28") == ["28", "False"]     # the user's value stays
    assert run("import numpy", OPENBLAS_THREAD_TIMEOUT="20") == ["20", "True"]
    assert run("", OPENBLAS_THREAD_TIMEOUT="x") == ["x", "False"]


def test_short_spin_needs_numpys_openblas(monkeypatch):
    """Another BLAS under NumPy (MKL, Accelerate) has its own thread settings: no slices."""
    from tostnp.backend import openblas
    monkeypatch.setattr(openblas, "_value", "22")
    monkeypatch.setattr(openblas, "_numpy_openblas", None)
    import threadpoolctl
    monkeypatch.setattr(threadpoolctl, "threadpool_info", lambda: [
        {"user_api": "blas", "internal_api": "mkl", "filepath": "/x/numpy/libmkl_rt.so"}])
    assert openblas.spin_is_short() is False
    monkeypatch.setattr(openblas, "_numpy_openblas", None)
    monkeypatch.setattr(threadpoolctl, "threadpool_info", lambda: [
        {"user_api": "blas", "internal_api": "openblas",
         "filepath": "/x/numpy.libs/libscipy_openblas64_.so"}])
    assert openblas.spin_is_short() is True


def test_short_spin_without_threadpoolctl(monkeypatch):
    """A NumPy-only environment (Pyodide's) has no threadpoolctl: the layer runs whole, and
    on one thread the question is never asked."""
    import builtins
    from tostnp.backend import openblas
    from tostnp.nn import tssa
    monkeypatch.setattr(openblas, "_value", "22")
    monkeypatch.setattr(openblas, "_numpy_openblas", None)
    real_import = builtins.__import__

    def no_threadpoolctl(name, *a, **k):
        if name == "threadpoolctl":
            raise ImportError("no threadpoolctl here")
        return real_import(name, *a, **k)
    monkeypatch.setattr(builtins, "__import__", no_threadpoolctl)
    asked = []
    monkeypatch.setattr(tssa, "spin_is_short", lambda: asked.append(1) or openblas.spin_is_short())
    monkeypatch.setattr(tuning, "LAYER_SLICE_MIN_ELEMENTS", 1)
    x = np.zeros((4, 8, 16))
    assert tssa.batch_slices(x, np) == [(0, 4)] and not asked          # one thread
    old = kernels.set_threads(2)                 # (backend.threads needs threadpoolctl too)
    try:
        assert tssa.batch_slices(x, np) == [(0, 4)] and asked
    finally:
        kernels.set_threads(old)
