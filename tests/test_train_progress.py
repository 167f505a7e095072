"""Progress when the output is not a terminal: ``train`` with its output to a pipe prints a line
every --progress-seconds (step, loss, time elapsed and left), and each line arrives while the run
is still going (not held in a pipe's buffer until the end)."""
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINE = re.compile(r"^step (\d+)/(\d+) \((\d+)%\): loss ([0-9.]+), (.+) elapsed, about (.+) left$")


def _seconds(text: str) -> int:
    """'12 s', '3 min 05 s', '1 h 02 min' -> seconds (written here from the format, not the
    code's function)."""
    total = 0
    for n, unit in re.findall(r"(\d+) (h|min|s)\b", text):
        total += int(n) * {"h": 3600, "min": 60, "s": 1}[unit]
    assert total or text == "0 s", text
    return total


@pytest.mark.slow
def test_piped_training_prints_timed_progress_lines(tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "tostnp", "train", "vision", "--steps", "200", "--width", "8",
           "--depth", "1", "--heads", "2", "--eval-every", "0", "--progress-seconds", "0.05",
           "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=tmp_path)
    arrived = []                                   # (time, line, the run still going?)
    for line in proc.stdout:
        arrived.append((time.monotonic(), line.rstrip("\n"), proc.poll() is None))
    err = proc.stderr.read()
    assert proc.wait(timeout=600) == 0, err[-2000:]
    wall = time.monotonic() - t0
    progress = [(t, LINE.match(ln), going) for t, ln, going in arrived if LINE.match(ln)]
    assert len(progress) >= 2, [ln for _, ln, _ in arrived]
    # the lines say what the run did: steps rising, total 60, the percentage of the step, the
    # loss of that step's batch as metrics.jsonl has it where the step was logged (200 steps:
    # about 40 lines on an idle machine, more spread out under load)
    logged = {r["step"]: r["loss"] for r in map(json.loads, open(out / "metrics.jsonl"))
              if r["kind"] == "train"}
    steps = [int(m.group(1)) for _, m, _ in progress]
    assert steps == sorted(set(steps)) and all(0 < s < 200 for s in steps)
    for _, m, _ in progress:
        step, total, pct, loss = int(m.group(1)), int(m.group(2)), int(m.group(3)), m.group(4)
        assert total == 200 and pct == round(100 * step / 200)
        if step in logged:
            assert float(loss) == pytest.approx(logged[step], abs=5e-5)
        elapsed, left = _seconds(m.group(5)), _seconds(m.group(6))
        assert elapsed >= 0 and left >= 0
    elapsed = [_seconds(m.group(5)) for _, m, _ in progress]
    assert elapsed == sorted(elapsed)
    # a line reached the reader while the run was still going: the pipe was flushed, and the
    # lines before training (the model, the data) came first
    assert progress[0][2], "the first progress line arrived only when the run had ended"
    first = next(i for i, (_, ln, _) in enumerate(arrived) if LINE.match(ln))
    assert any("parameters" in ln for _, ln, _ in arrived[:first])
    # timed, not one per step: at most one line per 0.05 s of the whole run
    assert len(progress) <= wall / 0.05 + 1, (len(progress), wall)
    assert any(ln.startswith("test accuracy") for _, ln, _ in arrived[first:])


@pytest.mark.parametrize("no_progress", [False, True])
def test_every_update_at_zero_seconds_and_none_with_no_progress(tmp_path, capsys, no_progress):
    """In-process (the output captured: not a terminal): --progress-seconds 0 gives a line after
    every update but the last (the final report follows it); --no-progress gives none."""
    from tostnp.__main__ import main
    text = tmp_path / "t.txt"
    text.write_text("hello world, hello tokens. " * 40)
    assert main(["train", "lm", "--text", str(text), "--tokenizer", "char", "--steps", "12",
                 "--width", "8", "--depth", "1", "--heads", "2", "--block-size", "16",
                 "--batch-size", "4", "--word-rate-samples", "0", "--eval-every", "0",
                 "--progress-seconds", "0", "--out", str(tmp_path / "r")]
                + (["--no-progress"] if no_progress else [])) == 0
    steps = [int(m.group(1)) for m in map(LINE.match, capsys.readouterr().out.splitlines())
             if m]
    assert steps == ([] if no_progress else list(range(1, 12)))
