"""The map between tostnp's parameter names and the torch models' parameters: copying tostnp's
initial weights into a torch model, reading its gradients and parameters back under tostnp's
names, and torch's AdamW with tostnp's hyper-parameters and no-decay rule."""
from __future__ import annotations

from .torch_models import torch_defs


# --------------------------------------------------------------------------------------------
# tostnp key <-> torch parameter map (tostnp stores Linear weights (in, out): transpose)
# --------------------------------------------------------------------------------------------
def _block_map(prefix, blk, bias):
    m = [(f"{prefix}ln1.gamma", blk.ln1.weight, False), (f"{prefix}ln1.beta", blk.ln1.bias, False),
         (f"{prefix}tssa.W_u", blk.tssa.W_u.weight, True),
         (f"{prefix}tssa.temp", blk.tssa.temp, False),
         (f"{prefix}tssa.W_o", blk.tssa.W_o.weight, True),
         (f"{prefix}ls1.gamma", blk.ls1, False),
         (f"{prefix}ln2.gamma", blk.ln2.weight, False), (f"{prefix}ln2.beta", blk.ln2.bias, False),
         (f"{prefix}mlp.W1", blk.fc1.weight, True), (f"{prefix}mlp.W2", blk.fc2.weight, True),
         (f"{prefix}ls2.gamma", blk.ls2, False)]
    if bias:
        m += [(f"{prefix}tssa.b_u", blk.tssa.W_u.bias, False),
              (f"{prefix}tssa.b_o", blk.tssa.W_o.bias, False),
              (f"{prefix}mlp.b1", blk.fc1.bias, False), (f"{prefix}mlp.b2", blk.fc2.bias, False)]
    if blk.tssa.causal:
        m.append((f"{prefix}tssa.denom_bias", blk.tssa.denom_bias, False))
    return m


def param_map(kind, model):
    """[(tostnp key, torch parameter, transpose?)] covering every parameter of both."""
    if kind == "block":
        return _block_map("", model, model.tssa.W_u.bias is not None)
    if kind == "lm":
        m = [("wte", model.wte.weight, False), ("wpe", model.wpe.weight, False)]
        for i, blk in enumerate(model.blocks):
            m += _block_map(f"blocks.{i}.", blk, False)
        return m + [("ln_f.gamma", model.ln_f.weight, False), ("ln_f.beta", model.ln_f.bias, False)]
    m = [("patch.W", model.patch.weight, True), ("patch.b", model.patch.bias, False),
         ("pos_embed", model.pos_embed, False)]
    for i, blk in enumerate(model.blocks):
        m += _block_map(f"blocks.{i}.", blk, True)
    m.append(("cls_token", model.cls_token, False))
    for j, c in enumerate(model.cab):
        p = f"cab.{j}."
        m += [(p + "norm1.gamma", c.norm1.weight, False), (p + "norm1.beta", c.norm1.bias, False),
              (p + "attn.W_q", c.q.weight, True), (p + "attn.b_q", c.q.bias, False),
              (p + "attn.W_kv", c.kv.weight, True), (p + "attn.b_kv", c.kv.bias, False),
              (p + "attn.W_o", c.proj.weight, True), (p + "attn.b_o", c.proj.bias, False),
              (p + "ls1.gamma", c.ls1, False),
              (p + "norm2.gamma", c.norm2.weight, False), (p + "norm2.beta", c.norm2.bias, False),
              (p + "mlp.W1", c.fc1.weight, True), (p + "mlp.b1", c.fc1.bias, False),
              (p + "mlp.W2", c.fc2.weight, True), (p + "mlp.b2", c.fc2.bias, False),
              (p + "ls2.gamma", c.ls2, False)]
    return m + [("norm.gamma", model.norm.weight, False), ("norm.beta", model.norm.bias, False),
                ("head.W", model.head.weight, True), ("head.b", model.head.bias, False)]


def transplant(kind, model, params):
    """Copy tostnp's parameter dict into the torch model; asserts a one-to-one map."""
    import numpy as np
    torch = torch_defs()["torch"]
    m = param_map(kind, model)
    keys = [k for k, _, _ in m]
    assert len(set(keys)) == len(keys) == len(params) and set(keys) == set(params), \
        (sorted(set(params) - set(keys)), sorted(set(keys) - set(params)))
    assert len({id(p) for _, p, _ in m}) == len(list(model.parameters())), "unmapped torch params"
    with torch.no_grad():
        for k, p, tr in m:
            a = np.asarray(params[k])
            a = a.T if tr else a
            assert tuple(a.shape) == tuple(p.shape), (k, a.shape, tuple(p.shape))
            p.copy_(torch.from_numpy(np.ascontiguousarray(a)).to(p.dtype))
    return m


def torch_grads_as_tostnp(m):
    return {k: (p.grad.T if tr else p.grad).detach().numpy() for k, p, tr in m}


def torch_params_as_tostnp(m):
    return {k: (p.T if tr else p).detach().numpy() for k, p, tr in m}


def make_torch_adamw(m, tcfg):
    """torch.optim.AdamW with tostnp's hyper-parameters and its no-decay rule (by tostnp name)."""
    torch = torch_defs()["torch"]
    from tostnp.train.optim import default_no_decay
    decay = [p for k, p, _ in m if not default_no_decay(k)]
    no_decay = [p for k, p, _ in m if default_no_decay(k)]
    return torch.optim.AdamW([{"params": decay, "weight_decay": tcfg.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=tcfg.lr, betas=(tcfg.beta1, tcfg.beta2), eps=1e-8)
