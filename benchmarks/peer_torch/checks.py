"""Part 1 of the peer benchmark: equivalence. tostnp's initial weights copied into the torch
model; the first loss, every gradient, the losses of 3 full training steps and the parameters
after them compared (float32 and float64; "stress": LayerScale 1, random temp and denom_bias),
and the ToST block's output and gradients. Errors are :func:`tostnp.analysis.oracle.rel_err`
with tostnp's values as the reference."""
from __future__ import annotations

import statistics

from tostnp.analysis.oracle import rel_err

from .setups import BLOCK_SHAPE, torch_block, torch_trainer, tostnp_block, tostnp_trainer
from .torch_models import torch_defs
from .weights import torch_grads_as_tostnp, torch_params_as_tostnp


def _max_rel(ours, theirs):
    """(key, error) of the worst entry of two dicts of arrays, ``ours`` the reference."""
    return max(((k, rel_err(theirs[k], ours[k])) for k in ours), key=lambda kv: kv[1])


def check_model(kind, dtype_name="float32", stress=False, steps=3):
    import numpy as np
    from tostnp.models import num_params
    torch = torch_defs()["torch"]
    dtype = np.float64 if dtype_name == "float64" else np.float32
    tstep, task, tcfg, params, opt = tostnp_trainer(kind, dtype=dtype)
    if stress:   # make the ToST blocks matter: LayerScale 1, random temp / denom_bias
        g = np.random.default_rng(7)
        for k in list(params):
            if k.endswith("ls1.gamma") or k.endswith("ls2.gamma"):
                params[k] = np.ones_like(params[k])
            elif k.endswith("tssa.temp"):
                params[k] = g.uniform(0.5, 2.0, size=params[k].shape).astype(dtype)
            elif k.endswith("tssa.denom_bias"):
                params[k] = (0.3 * g.standard_normal(params[k].shape)).astype(dtype)
        opt.params.update(params)
    batch0 = task.next_batch()
    bcopy = tuple(np.array(b, copy=True) for b in batch0)
    cstep, model, m, topt, _, _ = torch_trainer(kind, task=task, tcfg=tcfg, params0=params,
                                                dtype=dtype)
    n_np = num_params(params)
    n_t = sum(p.numel() for p in model.parameters())
    assert n_np == n_t, (n_np, n_t)
    # first loss and every gradient, before any update
    loss_np, grads_np, _ = task.loss_and_grads(params, batch0)
    x = torch.from_numpy(bcopy[0])
    x = x.to(torch.float64 if dtype == np.float64 else torch.float32) if x.is_floating_point() else x
    logits = model(x)
    y = torch.from_numpy(bcopy[1])
    F = torch_defs()["F"]
    loss_t = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    model.zero_grad(set_to_none=True)
    loss_t.backward()
    gk, gerr = _max_rel(grads_np, torch_grads_as_tostnp(m))
    # full training steps on identical batches (clip + lr schedule + AdamW)
    step_loss_err = 0.0
    for _ in range(steps):
        b = task.next_batch()
        bc = tuple(np.array(a, copy=True) for a in b)
        l1 = tstep(b)["loss"]
        l2 = cstep(bc)["loss"]
        step_loss_err = max(step_loss_err, abs(l1 - l2) / abs(l1))
    pk, perr = _max_rel(opt.params, torch_params_as_tostnp(m))
    tp = torch_params_as_tostnp(m)
    perr_med = statistics.median(rel_err(tp[k], opt.params[k]) for k in tp)
    return {"model": kind, "dtype": dtype_name, "stress": stress, "params_tostnp": int(n_np),
            "params_torch": int(n_t), "loss_tostnp": float(loss_np), "loss_torch": loss_t.item(),
            "loss_abs_diff": abs(float(loss_np) - loss_t.item()),
            "loss_rel_diff": abs(float(loss_np) - loss_t.item()) / abs(float(loss_np)),
            "grad_max_rel_err": gerr, "grad_worst_key": gk, "steps": steps,
            "step_loss_max_rel_diff": step_loss_err,
            "param_max_rel_err": perr, "param_worst_key": pk, "param_median_rel_err": perr_med}


def check_block(causal):
    a = tostnp_block(causal)()["_out"]
    y_np, dx_np, g_np = a
    b = torch_block(causal)()["_out"]
    y_t, xt, m = b
    gk, gerr = _max_rel(g_np, torch_grads_as_tostnp(m))
    return {"block": "causal" if causal else "non-causal", **{k: v for k, v in BLOCK_SHAPE.items()},
            "y_rel_err": rel_err(y_t.detach().numpy(), y_np),
            "dx_rel_err": rel_err(xt.grad.numpy(), dx_np),
            "grad_max_rel_err": gerr, "grad_worst_key": gk}


def run_checks(out):
    """Both libraries in one process: 1 thread each (2 + 2 threads here interfere badly)."""
    from threadpoolctl import threadpool_limits
    torch = torch_defs()["torch"]
    torch.set_num_threads(1)
    res = []
    print("\n== 1. Equivalence: tostnp's init copied into the torch model, same batches ==")
    print(f"{'model':6s} {'dtype':7s} {'variant':7s} {'params':>8s} {'loss tostnp':>12s} "
          f"{'loss torch':>12s} {'rel diff':>8s} {'grad err (worst param)':>36s} "
          f"{'3-step losses':>13s} {'params after 3 steps: max (worst), median':>44s}")
    with threadpool_limits(limits=1, user_api="blas"):
        for kind in ("lm", "vision"):
            for dt in ("float32", "float64"):
                for stress in ((False, True) if kind == "lm" else (False,)):
                    r = check_model(kind, dt, stress)
                    res.append(r)
                    print(f"{kind:6s} {dt:7s} {'stress' if stress else 'init':7s} "
                          f"{r['params_tostnp']:>8,d} {r['loss_tostnp']:12.7f} "
                          f"{r['loss_torch']:12.7f} {r['loss_rel_diff']:8.1e} "
                          f"{r['grad_max_rel_err']:8.1e} ({r['grad_worst_key']:>24s}) "
                          f"{r['step_loss_max_rel_diff']:13.1e} {r['param_max_rel_err']:8.1e} "
                          f"({r['param_worst_key']:>20s}) {r['param_median_rel_err']:8.1e}")
        print("  params: tostnp count == torch count (asserted). rel diff: |loss_np - loss_torch| "
              "/ loss at the first batch. grad err: max over parameters of max|g_np - g_torch| / "
              "max|g_np|. 3-step losses: max rel diff of the losses of 3 full training steps "
              "(clip + lr schedule + AdamW) on the same batches; then the parameters after them. "
              "'stress': LayerScale gammas 1, random temp and denom_bias, so the LM's ToST blocks "
              "shape the loss (at init their gammas are 1e-5).")
        for causal in (False, True):
            r = check_block(causal)
            res.append(r)
            print(f"  ToST block {r['block']:10s} B={r['B']} N={r['N']} C={r['C']} h={r['h']} "
                  f"float32: rel err y {r['y_rel_err']:.1e}, dx {r['dx_rel_err']:.1e}, "
                  f"param grads {r['grad_max_rel_err']:.1e} ({r['grad_worst_key']})")
    out["checks"] = res

