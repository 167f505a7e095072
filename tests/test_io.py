"""tostnp.io.atomic: the atomic writer leaves either the old file or the whole new one, never a part,
and no temporary file behind."""
import os

import pytest

from tostnp.io.atomic import atomic_path, atomic_savefig, atomic_write_bytes, atomic_write_text


def test_writes_content_and_leaves_no_temporary(tmp_path):
    p = tmp_path / "sub" / "out.json"                     # the parent is created
    atomic_write_text(p, "héllo\n")
    assert p.read_text(encoding="utf-8") == "héllo\n"
    atomic_write_bytes(p, b"\x00\x01")
    assert p.read_bytes() == b"\x00\x01"
    assert os.listdir(p.parent) == ["out.json"]


def test_ordinary_permissions(tmp_path):
    p = tmp_path / "a.txt"
    atomic_write_text(p, "x")
    mask = os.umask(0)
    os.umask(mask)
    assert (p.stat().st_mode & 0o777) == 0o666 & ~mask


def test_original_intact_when_the_writer_raises(tmp_path):
    p = tmp_path / "metrics.jsonl"
    p.write_text("old\n")
    with pytest.raises(RuntimeError, match="disk full"):
        with atomic_path(p) as tmp:
            with open(tmp, "w") as f:
                f.write("half of the new")
            raise RuntimeError("disk full")
    assert p.read_text() == "old\n"
    assert os.listdir(tmp_path) == ["metrics.jsonl"]


def test_interrupt_leaves_nothing(tmp_path):
    p = tmp_path / "ckpt.npz"
    with pytest.raises(KeyboardInterrupt):
        with atomic_path(p) as tmp:
            # in a folder of its own inside the same directory (same file system)
            assert tmp.endswith(".npz") and os.path.dirname(os.path.dirname(tmp)) == str(tmp_path)
            raise KeyboardInterrupt
    assert os.listdir(tmp_path) == []


def test_savefig(tmp_path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    p = tmp_path / "fig.png"
    atomic_savefig(fig, p, dpi=50)
    plt.close(fig)
    assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert os.listdir(tmp_path) == ["fig.png"]
