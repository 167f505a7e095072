"""Shared pytest setup: the ``slow`` marker.

``pytest`` runs everything (as ``python3 run.py test`` and CI do); ``pytest -m "not slow"`` is
the fast inner loop: it leaves out the tests that execute notebooks, train models end to end
through the CLI or run the benchmark. The shared oracles are in tests/references.py.
"""


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "slow: executes notebooks, trains through the CLI or runs the benchmark "
                   "(deselect with -m 'not slow')")
