"""Shared pytest setup: the ``slow`` marker.

``pytest`` runs everything (as ``python3 run.py test`` and CI do); ``pytest -m "not slow"`` is
the fast inner loop: it leaves out the tests that execute notebooks, train models end to end
through the CLI or run the benchmark. The shared oracles are in tests/references.py; the
``device`` fixture runs a test on every array device of tests/devices.py.
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
