"""The GitHub Actions workflows load as YAML and say what the README says they do. They run on
GitHub, not here: this checks their form, and that the tests workflow covers every Python of
pyproject.toml on Linux, macOS and Windows with the quick selection .ci/test-python uses."""
import re
import tomllib
from pathlib import Path

import yaml     # PyYAML: jupytext's dependency (requirements-exercises.txt)

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = ROOT / ".github" / "workflows"


def load(name):
    return yaml.safe_load((WORKFLOWS / name).read_text(encoding="utf-8"))


def supported_pythons():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return sorted((c.rsplit(":: ", 1)[1] for c in meta["classifiers"]
                   if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)),
                  key=lambda v: tuple(map(int, v.split("."))))


def test_every_workflow_is_valid_yaml_with_jobs_and_steps():
    files = sorted(WORKFLOWS.glob("*.yml"))
    assert {f.name for f in files} >= {"book.yml", "tests.yml"}
    for f in files:
        wf = load(f.name)
        # YAML 1.1 reads the key `on` as True
        assert wf.get("on", wf.get(True)), f"{f.name}: no trigger"
        for name, job in wf["jobs"].items():
            assert job["runs-on"] and job["steps"], f"{f.name}: job {name}"
            for step in job["steps"]:
                assert "uses" in step or "run" in step, f"{f.name}: {step}"


def test_tests_workflow_covers_every_python_and_os_with_the_quick_tests():
    job = load("tests.yml")["jobs"]["quick-tests"]
    matrix = job["strategy"]["matrix"]
    assert matrix["python-version"] == supported_pythons() == ["3.11", "3.12", "3.13", "3.14"]
    assert {m.split("-")[0] for m in matrix["os"]} == {"ubuntu", "macos", "windows"}
    assert job["strategy"]["fail-fast"] is False
    runs = "\n".join(s.get("run", "") for s in job["steps"])
    assert "-r requirements-test.txt" in runs
    # the same selection as .ci/test-python's default
    ci = (ROOT / ".ci" / "test-python").read_text(encoding="utf-8")
    default = re.search(r'set -- (-q -m "not slow")', ci).group(1)
    assert default in runs, runs
