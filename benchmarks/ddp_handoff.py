#!/usr/bin/env python
"""ddp_handoff.py -- the laptop-to-cluster hand-off, run: tostnp -> published layout ->
PyTorch DistributedDataParallel (2 CPU processes, gloo) -> safetensors -> tostnp.

    # with the torch venv (torch is never a dependency of tostnp; this file is outside the
    # package), and a Python that has tostnp's requirements for the tostnp commands:
    PYTHONPATH=. /work/venvs/torch/bin/python benchmarks/ddp_handoff.py \\
        --tostnp-python .venv/bin/python --json docs/results/ddp_handoff.json

1. ``tostnp train vision`` (short) with the published form of the model (``--stem conv --pos
   fourier --gelu erf``) on the bundled digits;
2. ``tostnp convert RUN start.safetensors`` (the published ``state_dict`` layout);
3. ``torchrun --standalone --nproc_per_node 2`` this file's worker: each rank builds the
   published-form vision model in PyTorch (TSSA from benchmarks/peer_torch; stem, Fourier
   positions and class-attention block with the published names here), loads the file with
   ``load_state_dict(strict=True)``, evaluates it (the export direction: logits against
   tostnp's), wraps it in DistributedDataParallel and trains ``--steps`` AdamW steps on its half
   of each batch (BatchNorm in training mode, its buffers broadcast from rank 0); the ranks'
   parameters are compared at the end (identical, or the run fails); rank 0 saves
   ``trained.safetensors`` and PyTorch's test logits;
4. ``tostnp convert trained.safetensors BACK --like RUN``, then ``tostnp evaluate`` and
   tostnp's float32 logits of the test set: the accuracies must be equal and the logits equal to
   float32 rounding (max |difference| <= 1e-5 max |logit|).

Writes one JSON (``--json``) with the commands, figures, date and CPU. Every number in it is
measured in the run that writes it.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
LOGIT_RTOL = 1e-5            # float32 rounding, relative to the largest logit


# ============================================================================================
# the published-form vision model in PyTorch (state_dict names of the published code)
# ============================================================================================
def peer_tssa():
    """The TSSA module of benchmarks/peer_torch (the package's torch_models)."""
    sys.path.insert(0, HERE)
    from peer_torch.torch_models import torch_defs
    return torch_defs()["TSSA"]


def published_vision(cfg: dict):
    """An nn.Module with the published ToST vision ``state_dict`` for tostnp's VisionConfig
    ``cfg`` (stem "conv", pos "fourier", gelu "erf", cab "published", pool "cls")."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    assert (cfg["stem"], cfg["pos"], cfg["gelu"], cfg["cab"], cfg["pool"], cfg["mixer"],
            cfg["num_registers"]) == ("conv", "fourier", "erf", "published", "cls", "tssa", 0), cfg
    TSSA = peer_tssa()
    C, h, eps = cfg["width"], cfg["num_heads"], cfg["ln_eps"]
    H = cfg["mlp_ratio"] * C

    class Mlp(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(C, H), nn.Linear(H, C)

        def forward(self, x):
            return self.fc2(F.gelu(self.fc1(x)))                              # exact GELU

    class Attn(nn.Module):
        """The published TSSA's names (qkv: W_u, to_out.0: W_o); peer_torch's computation."""

        def __init__(self):
            super().__init__()
            self.h, self.p, self.causal = h, C // h, False
            self.qkv = nn.Linear(C, C)
            self.temp = nn.Parameter(torch.ones(h, 1))
            self.to_out = nn.Sequential(nn.Linear(C, C))

        W_u = property(lambda self: self.qkv)
        W_o = property(lambda self: self.to_out[0])

        def forward(self, x):
            return TSSA.forward(self, x)

    class Residual(nn.Module):
        """The published names around an attention: norm1, attn, gamma1, norm2, mlp, gamma2."""

        def __init__(self, attn):
            super().__init__()
            self.norm1, self.attn = nn.LayerNorm(C, eps=eps), attn
            self.norm2, self.mlp = nn.LayerNorm(C, eps=eps), Mlp()
            self.gamma1 = nn.Parameter(torch.full((C,), cfg["layer_scale_init"]))
            self.gamma2 = nn.Parameter(torch.full((C,), cfg["layer_scale_init"]))

    class Block(Residual):
        def forward(self, x):
            x = x + self.gamma1 * self.attn(self.norm1(x))
            return x + self.gamma2 * self.mlp(self.norm2(x))

    class ClassAttn(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)

        def forward(self, u):                                                # (B, 1+N, C)
            B, M, _ = u.shape
            q, k, v = self.qkv(u).view(B, M, 3, h, C // h).permute(2, 0, 3, 1, 4)
            o = F.scaled_dot_product_attention(q[:, :, :1], k, v)            # (B, h, 1, p)
            return self.proj(o.transpose(1, 2).reshape(B, 1, C))

    class ClassAttnBlock(Residual):
        """XCiT's block with tokens_norm: the patch tokens are re-normalised and passed on."""

        def forward(self, x):                                                # (B, 1+N, C)
            u = self.norm1(x)
            x = self.norm2(x + self.gamma1 * torch.cat([self.attn(u), u[:, 1:]], dim=1))
            cls = x[:, :1] + self.gamma2 * self.mlp(x[:, :1])
            return torch.cat([cls, 2.0 * x[:, 1:]], dim=1)

    class Vision(nn.Module):
        def __init__(self):
            super().__init__()
            k = int(round(math.log2(cfg["patch_size"])))
            ch = [cfg["in_chans"]] + [C // 2 ** (k - 1 - s) for s in range(k)]
            stages = []
            for s in range(k):
                stages.append(nn.Sequential(
                    nn.Conv2d(ch[s], ch[s + 1], 3, stride=2, padding=1, bias=False),
                    nn.BatchNorm2d(ch[s + 1])))
                if s < k - 1:
                    stages.append(nn.GELU())
            self.patch_embed = nn.Module()
            self.patch_embed.proj = nn.Sequential(*stages)
            self.pos_embeder = nn.Module()
            self.pos_embeder.token_projection = nn.Conv2d(64, C, 1)
            self.cls_token = nn.Parameter(torch.zeros(1, 1, C))
            self.blocks = nn.ModuleList([Block(Attn()) for _ in range(cfg["depth"])])
            self.cls_attn_blocks = nn.ModuleList([ClassAttnBlock(ClassAttn())
                                                  for _ in range(cfg["num_cls_blocks"])])
            self.norm = nn.LayerNorm(C, eps=eps)
            self.head = nn.Linear(C, cfg["num_classes"])

        @staticmethod
        def fourier(Hp, Wp):
            """(64, Hp, Wp) XCiT features: y then x, sin/cos pairs, temperature 10000."""
            i = torch.arange(32, dtype=torch.float64)
            t = 10000.0 ** (2 * torch.div(i, 2, rounding_mode="floor") / 32)
            y = 2 * math.pi * torch.arange(1, Hp + 1, dtype=torch.float64) / (Hp + 1e-6)
            x = 2 * math.pi * torch.arange(1, Wp + 1, dtype=torch.float64) / (Wp + 1e-6)

            def feats(v):                                                    # (L,) -> (32, L)
                a = v[None, :] / t[:, None]
                return torch.where((i % 2 == 0)[:, None], torch.sin(a), torch.cos(a))
            return torch.cat([feats(y)[:, :, None].expand(32, Hp, Wp),
                              feats(x)[:, None, :].expand(32, Hp, Wp)]).float()

        def forward(self, images):                                           # (B, H, W, Cin)
            z = self.patch_embed.proj(images.permute(0, 3, 1, 2))            # (B, C, Hp, Wp)
            B, _, Hp, Wp = z.shape
            pos = self.pos_embeder.token_projection(self.fourier(Hp, Wp)[None])  # (1, C, Hp, Wp)
            x = (z + pos).flatten(2).transpose(1, 2)                         # (B, N, C) row-major
            for blk in self.blocks:
                x = blk(x)
            x = torch.cat([self.cls_token.expand(B, -1, -1), x], dim=1)
            for blk in self.cls_attn_blocks:
                x = blk(x)
            return self.head(self.norm(x[:, 0]))

    return Vision()


# ============================================================================================
# the worker (one rank of torchrun)
# ============================================================================================
def worker(args) -> None:
    import numpy as np
    import torch
    import torch.distributed as dist
    from safetensors.torch import load_file, save_file
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    with open(args.config) as f:
        cfg = json.load(f)
    with np.load(args.data, allow_pickle=False) as z:
        Xtr, ytr, Xte = (torch.from_numpy(z[k]) for k in ("X_train", "y_train", "X_test"))
    torch.manual_seed(0)
    model = published_vision(cfg)
    model.load_state_dict(load_file(args.start), strict=True)
    if rank == 0:
        model.eval()
        with torch.no_grad():
            np.save(os.path.join(args.work, "torch_start_logits.npy"), model(Xte).numpy())
    model.train()
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=args.lr, weight_decay=0.0)
    g = torch.Generator().manual_seed(1)                       # the same batches on every rank
    losses, t0 = [], time.perf_counter()
    for _ in range(args.steps):
        idx = torch.randint(0, Xtr.shape[0], (args.batch_size,), generator=g)[rank::world]
        loss = torch.nn.functional.cross_entropy(ddp(Xtr[idx]), ytr[idx])
        opt.zero_grad()
        loss.backward()                                         # DDP averages the gradients
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(float(mean) / world)
    seconds = time.perf_counter() - t0
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    every = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(every, flat)
    if rank == 0:
        spread = max(float((e - every[0]).abs().max()) for e in every)
        assert spread == 0.0, f"the ranks' parameters differ by {spread}"
        sd = model.state_dict()
        save_file({k: v.detach().clone().contiguous() for k, v in sd.items()}, args.trained)
        model.eval()
        with torch.no_grad():
            np.save(os.path.join(args.work, "torch_logits.npy"), model(Xte).numpy())
        with open(os.path.join(args.work, "torch_run.json"), "w") as f:
            json.dump({"world_size": world, "backend": dist.get_backend(), "steps": args.steps,
                       "batch_size": args.batch_size, "per_rank_batch": args.batch_size // world,
                       "lr": args.lr, "train_seconds": round(seconds, 3),
                       "loss_first": losses[0], "loss_last": losses[-1],
                       "rank_param_spread": spread, "torch": torch.__version__,
                       "parameters": int(flat.numel())}, f)
    dist.destroy_process_group()


# ============================================================================================
# the hand-off
# ============================================================================================
TOSTNP_LOGITS = """
import sys, numpy as np
from tostnp.io import load_model
from tostnp.models import vision_forward
kind, cfg, params, _ = load_model(sys.argv[1])
X = np.load(sys.argv[2], allow_pickle=False)["X_test"]
np.save(sys.argv[3], np.asarray(vision_forward(X, params, cfg)[0]))
"""
DUMP_DATA = """
import sys, numpy as np
from tostnp.data import load_digits_split
Xtr, ytr, Xte, yte = load_digits_split()
np.savez(sys.argv[1], X_train=Xtr, y_train=ytr, X_test=Xte, y_test=yte)
"""


def _sh(cmd, env, log, work, label=None, retry_abort: bool = False) -> str:
    """Run ``cmd``; log it as a reader would type it (python, WORK/...) with its seconds.
    ``retry_abort``: run it once more if a worker aborted (SIGABRT, "terminate called without an
    active exception": seen once in CI inside PyTorch's gloo backward, not in tostnp's code);
    the log says so."""
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    shown = label or " ".join(
        "python" if i == 0 else c.replace(work, "WORK").replace(HERE, "benchmarks")
        for i, c in enumerate(cmd)).replace("python -m torch.distributed.run", "torchrun")
    if r.returncode != 0 and retry_abort and "(SIGABRT)" in r.stderr:
        print(f"ddp_handoff: a worker aborted (SIGABRT) in {shown}; running it once more",
              file=sys.stderr)
        log.append({"command": shown, "seconds": round(time.perf_counter() - t0, 2),
                    "aborted": "a worker aborted (SIGABRT); run once more"})
        t0 = time.perf_counter()
        r = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    log.append({"command": shown, "seconds": round(time.perf_counter() - t0, 2)})
    if r.returncode != 0:
        raise SystemExit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout[-3000:]}"
                         f"\n{r.stderr[-3000:]}")
    return r.stdout


def _accuracy_line(text: str) -> float:
    """The test accuracy that ``tostnp evaluate`` prints ("... test accuracy 0.9733 (...")."""
    return float(text.split("test accuracy", 1)[1].lstrip(": ").split()[0])


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            name = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        name = platform.processor() or platform.machine()
    return f"{name}, {os.cpu_count()} cores"


def handoff(args) -> dict:
    import numpy as np
    tp = args.tostnp_python
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    work = tempfile.mkdtemp(prefix="tost-ddp-")
    log: list = []
    t_all = time.perf_counter()
    try:
        run, start = os.path.join(work, "laptop"), os.path.join(work, "start.safetensors")
        train_out = _sh([tp, "-m", "tostnp", "train", "vision", "--steps", str(args.laptop_steps),
                         "--stem", "conv", "--pos", "fourier", "--gelu", "erf", "--seed", "0",
                         "--eval-every", "0",
                         "--no-progress", "--out", run], env, log, work)
        laptop_acc = _accuracy_line(train_out)
        _sh([tp, "-m", "tostnp", "convert", run, start], env, log, work)
        data = os.path.join(work, "digits.npz")
        _sh([tp, "-c", DUMP_DATA, data], env, log, work,
            "(the digits split as arrays for PyTorch: tostnp.data.load_digits_split)")
        with open(os.path.join(run, "checkpoint.json")) as f:
            cfg = json.load(f)["config"]["model"]
        cfg_path = os.path.join(work, "model.json")
        with open(cfg_path, "w") as f:
            json.dump(cfg, f)
        trained = os.path.join(work, "trained.safetensors")
        _sh([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
             "2", os.path.abspath(__file__), "--worker", "--w-config", cfg_path, "--w-data", data,
             "--w-start", start, "--w-trained", trained, "--w-work", work, "--steps", str(args.steps),
             "--batch-size", str(args.batch_size), "--lr", str(args.lr)], env, log, work,
            retry_abort=True)
        back = os.path.join(work, "back")
        _sh([tp, "-m", "tostnp", "convert", trained, back, "--like", run,
             "--image-size", str(cfg["image_size"])], env, log, work)
        tostnp_acc = _accuracy_line(_sh([tp, "-m", "tostnp", "evaluate", "--checkpoint", back],
                                        env, log, work))
        for ckpt, out in ((run, "tostnp_start_logits.npy"), (back, "tostnp_logits.npy")):
            _sh([tp, "-c", TOSTNP_LOGITS, ckpt, data, os.path.join(work, out)], env, log, work,
                f"(tostnp's float32 test logits of {os.path.basename(ckpt)}: load_model, "
                "vision_forward)")
        with np.load(data, allow_pickle=False) as z:
            y = z["y_test"]
        L = {k: np.load(os.path.join(work, k + ".npy")) for k in
             ("torch_start_logits", "tostnp_start_logits", "torch_logits", "tostnp_logits")}
        with open(os.path.join(work, "torch_run.json")) as f:
            ddp = json.load(f)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def compare(a, b):
        d = float(np.abs(L[a].astype(np.float64) - L[b]).max())
        return d, d / float(np.abs(L[b]).max())
    acc = lambda k: float(np.mean(np.argmax(L[k], axis=1) == y))          # noqa: E731
    d_start, r_start = compare("torch_start_logits", "tostnp_start_logits")
    d_back, r_back = compare("torch_logits", "tostnp_logits")
    res = {
        "what": "tostnp run -> published safetensors -> PyTorch DDP (gloo, 2 CPU processes) -> "
                "safetensors -> tostnp; test set of the bundled digits (450 images)",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": _cpu(), "python": platform.python_version(),
        "command": "PYTHONPATH=. python benchmarks/ddp_handoff.py " + " ".join(
            f"--{k.replace('_', '-')} {v}" for k, v in
            (("laptop_steps", args.laptop_steps), ("steps", args.steps),
             ("batch_size", args.batch_size), ("lr", args.lr))),
        "commands": log, "model": cfg, "ddp": ddp,
        "laptop": {"steps": args.laptop_steps, "tostnp_test_accuracy": laptop_acc,
                   "torch_test_accuracy": acc("torch_start_logits"),
                   "max_abs_logit_diff": d_start, "max_rel_logit_diff": r_start},
        "cluster": {"torch_test_accuracy": acc("torch_logits"),
                    "tostnp_test_accuracy": tostnp_acc,
                    "tostnp_test_accuracy_from_logits": acc("tostnp_logits"),
                    "max_abs_logit_diff": d_back, "max_rel_logit_diff": r_back},
        "logit_rtol": LOGIT_RTOL, "seconds_total": round(time.perf_counter() - t_all, 1)}
    # the export direction (tostnp's weights in PyTorch) and the import direction (DDP's in tostnp)
    assert r_start <= LOGIT_RTOL and r_back <= LOGIT_RTOL, res
    assert abs(res["laptop"]["torch_test_accuracy"] - laptop_acc) < 1e-4, res
    assert res["cluster"]["torch_test_accuracy"] == res["cluster"]["tostnp_test_accuracy_from_logits"]
    assert abs(res["cluster"]["torch_test_accuracy"] - tostnp_acc) < 1e-4, res     # 4 digits
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tostnp-python", default=sys.executable,
                    help="the Python that runs the tostnp commands (has tostnp's requirements)")
    ap.add_argument("--laptop-steps", type=int, default=60, help="tostnp training steps")
    ap.add_argument("--steps", type=int, default=100, help="DDP training steps")
    ap.add_argument("--batch-size", type=int, default=64, help="global batch (split over ranks)")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--json", default=None, help="write the result here")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    for a in ("config", "data", "start", "trained", "work"):
        ap.add_argument(f"--w-{a}", dest=a, help=argparse.SUPPRESS)    # torchrun: no prefix clash
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    res = handoff(args)
    c, lp = res["cluster"], res["laptop"]
    print(f"laptop ({lp['steps']} tostnp steps): test accuracy tostnp {lp['tostnp_test_accuracy']:.4f}"
          f", PyTorch {lp['torch_test_accuracy']:.4f}, max logit difference "
          f"{lp['max_abs_logit_diff']:.2e}")
    print(f"cluster ({res['ddp']['steps']} DDP steps on {res['ddp']['world_size']} "
          f"{res['ddp']['backend']} ranks, {res['ddp']['train_seconds']:.1f} s, loss "
          f"{res['ddp']['loss_first']:.3f} -> {res['ddp']['loss_last']:.3f}): test accuracy "
          f"PyTorch {c['torch_test_accuracy']:.4f}, tostnp {c['tostnp_test_accuracy']:.4f}, "
          f"max logit difference {c['max_abs_logit_diff']:.2e} "
          f"({c['max_rel_logit_diff']:.1e} of the largest)")
    print(f"total {res['seconds_total']} s")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
