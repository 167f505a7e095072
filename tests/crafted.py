"""Crafting hostile checkpoint files for the reliability tests: members rewritten in place and the
``.json`` copy's checksum updated to match, as a hostile file would have it."""
from __future__ import annotations

import hashlib
import io
import json
import zipfile

import numpy as np


def npy_bytes(a) -> bytes:
    """The ``.npy`` serialisation of ``a`` (what a member of a ``.npz`` holds)."""
    f = io.BytesIO()
    np.save(f, a)
    return f.getvalue()


def rewrite_member(npz: str, name: str, payload: bytes, compress=zipfile.ZIP_STORED) -> None:
    """Add (or replace) a raw member in an npz, keeping the others, and re-sign the json copy."""
    with zipfile.ZipFile(npz) as z:
        members = {i.filename: z.read(i) for i in z.infolist()}
    members[name] = payload
    with zipfile.ZipFile(npz, "w") as z:
        for k, v in members.items():
            z.writestr(k, v, compress_type=compress if k == name else zipfile.ZIP_STORED)
    js = npz[:-4] + ".json"
    with open(js) as f:
        meta = json.load(f)
    with open(npz, "rb") as f:
        meta["npz_sha256"] = hashlib.sha256(f.read()).hexdigest()
    with open(js, "w") as f:
        json.dump(meta, f)
