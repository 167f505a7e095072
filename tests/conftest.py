"""Shared pytest setup: the ``slow`` marker.

``pytest`` runs everything (as ``python3 run.py test`` and CI do); ``pytest -m "not slow"`` is
the fast inner loop: it leaves out the tests that execute notebooks, train models end to end
through the CLI or run the benchmark. The shared oracles are in tests/references.py; the
``device`` fixture runs a test on every array device of tests/devices.py; ``tssa_kernels``
runs one on each kind of the non-causal TSSA's fast kernels.
"""
import pytest


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "slow: executes notebooks, trains through the CLI or runs the benchmark "
                   "(deselect with -m 'not slow')")


@pytest.fixture(params=["strict", "cupy"])
def device(request):
    """A device of tests/devices.py: array_api_strict's "device1" everywhere, CuPy where a CUDA
    GPU is usable (skipped elsewhere)."""
    from devices import Device
    return Device(request.param)


@pytest.fixture(params=["numpy", "numba"])
def tssa_kernels(request, monkeypatch):
    """The fast path's TSSA statistics kernels of one kind: NumPy's (tostnp.backend.kernels) or
    the compiled ones (tostnp.backend.compiled, skipped where Numba does not import; the tests'
    install has it, requirements-fast.txt)."""
    from tostnp.backend import compiled
    if request.param == "numba" and not compiled.available():
        pytest.skip(f"compiled kernels unavailable: {compiled.describe()}")
    monkeypatch.setattr(compiled, "_on", request.param == "numba")
    return request.param
