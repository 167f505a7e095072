"""AdamW, its learning-rate schedule and global-norm gradient clipping (Array API only).

The optimizer used by the published ToST language models: AdamW with betas
(0.9, 0.95), a linear warm-up followed by a cosine decay from ``max_lr`` to ``min_lr``, gradient
clipping at global norm 1.0, and *no* weight decay on ``temp``, ``denom_bias``, norms and biases.

AdamW update for one parameter theta with gradient g at step t = 1, 2, ... (Loshchilov & Hutter,
decoupled weight decay; the same convention as ``torch.optim.AdamW``, where the decay is
multiplied by the learning rate)::

    m_t   = beta1 m_{t-1} + (1 - beta1) g                      first moment
    v_t   = beta2 v_{t-1} + (1 - beta2) g**2                   second moment
    mhat  = m_t / (1 - beta1**t),  vhat = v_t / (1 - beta2**t) bias correction
    theta = theta - lr * (weight_decay * theta + mhat / (sqrt(vhat) + eps))

``weight_decay`` is replaced by 0 for every name where ``no_decay(name)`` is True.

Which parameters are decayed (:func:`default_no_decay`)
--------------------------------------------------------
Weight decay shrinks a parameter toward zero. That is a sensible prior for the weight matrices
that multiply activations (linear layers, the patch embedding, the token embedding / tied LM
head), and a harmful one for parameters whose natural value is not zero or that only shift or
scale: biases, LayerNorm gain and shift, LayerScale gammas (decaying them would switch residual
branches off), the TSSA temperature ``temp`` and the causal ``denom_bias``. We also exempt the
position embedding and the CLS token, as the XCiT/ViT code that the published vision ToST
builds on does (nanoGPT, the base of the published LM, does decay its position embedding; the
difference is small and documented here). Pass your own ``no_decay`` callable to change it.

Every function takes the array namespace from its inputs, so the same code runs on NumPy,
CuPy and ``array_api_strict``; float32 parameters stay float32 (all scalars are Python floats).
"""
from __future__ import annotations

import math
import re
from typing import Callable

from .. import backend
from ..backend import tuning
from ..nn.params import is_state
from ..backend.validate import check_array

__all__ = ["AdamW", "default_no_decay", "lr_schedule", "clip_grad_norm"]

# Leaf names (the part after the last ".") that are never decayed.
_NO_DECAY_LEAVES = {"b", "bias", "beta", "gamma", "temp", "denom_bias"}
# b1, b2, b_qkv, b_o, ...: biases as tostnp.nn names them.
_BIAS_LEAF = re.compile(r"^b(\d+|_\w+)$")


def default_no_decay(name: str) -> bool:
    """True when the parameter called ``name`` should get no weight decay.

    ``name`` is a flat dotted key such as ``"blocks.0.tssa.W_u"``. Exempt (True):

    * biases: leaf ``b``, ``bias``, ``b1``/``b2``, ``b_<anything>`` (``b_qkv``, ``b_o``);
    * norms: leaf ``beta``/``gamma`` or any component starting with ``ln`` or containing
      ``norm`` (``ln1.gamma``, ``ln_f.beta``, ``norm.gamma``);
    * LayerScale: leaf ``gamma`` (``ls1.gamma``);
    * TSSA: any name containing ``temp`` or ``denom_bias``;
    * position embedding and CLS token: a component starting with ``pos`` or equal to
      ``wpe``, ``cls`` or ``cls_token``.

    Everything else (``W``, ``W_u``, ``W1``, token/patch embedding matrices, heads) is decayed.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    parts = name.split(".")
    leaf = parts[-1]
    if leaf in _NO_DECAY_LEAVES or _BIAS_LEAF.match(leaf):
        return True
    if "temp" in name or "denom_bias" in name:
        return True
    for part in parts:
        if part.startswith("ln") or "norm" in part:
            return True
        if part.startswith("pos") or part in ("wpe", "cls", "cls_token"):
            return True
    return False


def lr_schedule(step: int, *, max_lr: float, min_lr: float, warmup_steps: int,
                total_steps: int) -> float:
    """Learning rate for the update numbered ``step`` (0-based): linear warm-up, then cosine.

    * ``step < warmup_steps``: ``max_lr * (step + 1) / warmup_steps`` (never 0; ``max_lr`` at
      ``step = warmup_steps - 1``);
    * ``warmup_steps <= step <= total_steps``: ``min_lr + (max_lr - min_lr) * (1 + cos(pi r)) / 2``
      with ``r = (step - warmup_steps) / (total_steps - warmup_steps)`` (``max_lr`` at the end of
      warm-up, ``min_lr`` at ``step = total_steps``);
    * ``step > total_steps``: ``min_lr``.

    Returns a Python float.
    """
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be an int >= 0, got {step!r}")
    for nm, v in (("warmup_steps", warmup_steps), ("total_steps", total_steps)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"{nm} must be an int >= 0, got {v!r}")
    if total_steps < warmup_steps:
        raise ValueError(f"total_steps ({total_steps}) must be >= warmup_steps ({warmup_steps})")
    max_lr, min_lr = float(max_lr), float(min_lr)
    if not (0.0 <= min_lr <= max_lr) or not math.isfinite(max_lr):
        raise ValueError(f"need 0 <= min_lr <= max_lr (finite), got min_lr={min_lr}, "
                         f"max_lr={max_lr}")
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    if step >= total_steps:
        return min_lr
    r = (step - warmup_steps) / (total_steps - warmup_steps)  # in [0, 1)
    return min_lr + (max_lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * r))


def clip_grad_norm(grads: dict, max_norm: float | None):
    """Scale all gradients together so that their global L2 norm is at most ``max_norm``.

    total_norm = sqrt(sum over every array g in ``grads`` of sum(g**2)). When it exceeds
    ``max_norm`` every gradient is multiplied by ``max_norm / (total_norm + 1e-6)`` (the same
    rule as ``torch.nn.utils.clip_grad_norm_``). ``max_norm=None`` only measures.

    Returns ``(clipped, total_norm)``: a new dict (inputs are not modified) and the norm before
    clipping as a Python float. If the norm is not finite (NaN/Inf gradients) the gradients are
    returned unscaled, so the caller can see it and skip the step.
    """
    if not isinstance(grads, dict):
        raise TypeError(f"grads must be a dict of arrays, got {type(grads).__name__}")
    if max_norm is not None:
        max_norm = float(max_norm)
        if not max_norm > 0:
            raise ValueError(f"max_norm must be > 0 or None, got {max_norm}")
    sq = None
    for name, g in grads.items():
        xp = check_array(g, f"grads[{name!r}]")
        flat = xp.reshape(g, (-1,))
        s = xp.vecdot(flat, flat)  # 0-d sum(g**2), on the device, no temporary
        sq = s if sq is None else sq + s
    # One device-to-host transfer per call (not one per array).
    total_norm = math.sqrt(float(sq)) if sq is not None else 0.0
    if max_norm is None or not math.isfinite(total_norm) or total_norm <= max_norm:
        return dict(grads), total_norm
    scale = max_norm / (total_norm + 1e-6)  # Python float: keeps float32 float32
    return {name: g * scale for name, g in grads.items()}, total_norm


class AdamW:
    """AdamW with decoupled weight decay and bias correction (formulas in the module docstring).

    Parameters
    ----------
    params : dict[str, array]
        Flat dict of parameter arrays (any Array API namespace, one per model). ``step``
        replaces each entry with its updated array, so read parameters from this dict after
        each step (arrays you held before the step are left unchanged).
    lr : float
        Default learning rate (``step(grads, lr=...)`` overrides it, e.g. from
        :func:`lr_schedule`).
    betas, eps, weight_decay : the usual AdamW hyper-parameters.
    no_decay : callable(name) -> bool, default :func:`default_no_decay`
        Names for which the weight decay is 0.

    State: ``m.<name>``, ``v.<name>`` (same shape, dtype and device as the parameter) and the
    step count ``t``; see :meth:`state_dict`.
    """

    def __init__(self, params: dict, lr: float, betas=(0.9, 0.95), eps: float = 1e-8,
                 weight_decay: float = 0.1,
                 no_decay: Callable[[str], bool] | None = default_no_decay):
        if not isinstance(params, dict) or not params:
            raise TypeError("params must be a non-empty dict of arrays {name: array}")
        for name, p in params.items():
            if not isinstance(name, str):
                raise TypeError(f"params keys must be str, got {type(name).__name__}")
            check_array(p, f"params[{name!r}]")
        self.lr = float(lr)
        b1, b2 = (float(b) for b in betas)
        if not (0.0 <= b1 < 1.0 and 0.0 <= b2 < 1.0):
            raise ValueError(f"betas must lie in [0, 1), got {betas!r}")
        self.betas = (b1, b2)
        self.eps = float(eps)
        if not self.eps >= 0:
            raise ValueError(f"eps must be >= 0, got {eps!r}")
        self.weight_decay = float(weight_decay)
        if not self.weight_decay >= 0:
            raise ValueError(f"weight_decay must be >= 0, got {weight_decay!r}")
        no_decay = no_decay or (lambda name: False)
        self.params = params
        # Model state (BatchNorm running statistics) lives in params but is never optimised.
        self.names = [name for name in params if not is_state(name)]
        self.decay = {name: (0.0 if no_decay(name) else self.weight_decay) for name in self.names}
        self.t = 0
        self.m = {}
        self.v = {}
        # NumPy fast path: the parameters of one dtype and one decay form a group whose moments
        # live in one flat buffer each (m[name], v[name] are views into it), so that one kernel
        # call updates the whole group (tostnp.backend.kernels.adamw_update_flat); None where
        # the parameters are not all NumPy arrays, the fast path is off, or the model is larger
        # than tuning.ADAMW_FLAT_MAX_ELEMENTS (a step holds about three copies of the model).
        self._groups = self._flat_groups(params)
        for name in self.names:
            if name in self.m:
                continue
            p = params[name]
            xp = backend.namespace(p)
            self.m[name] = xp.zeros(p.shape, dtype=p.dtype, device=backend.device_of(p))
            self.v[name] = xp.zeros(p.shape, dtype=p.dtype, device=backend.device_of(p))

    def _flat_groups(self, params):
        spaces = {backend.namespace(params[name]) for name in self.names}
        fast = backend.fused(next(iter(spaces))) if len(spaces) == 1 else None
        if fast is None or sum(math.prod(params[n].shape) for n in self.names) \
                > tuning.ADAMW_FLAT_MAX_ELEMENTS:
            return None
        members: dict = {}                  # (dtype, decay) -> names, in the optimizer's order
        for name in self.names:
            members.setdefault((params[name].dtype, self.decay[name]), []).append(name)
        groups = []
        for (dtype, wd), names in members.items():
            shapes = [params[name].shape for name in names]
            m, m_views = fast.flat_zeros(shapes, dtype)
            v, v_views = fast.flat_zeros(shapes, dtype)
            self.m.update(zip(names, m_views))
            self.v.update(zip(names, v_views))
            groups.append((names, wd, m, v))
        return groups

    def _flat_path(self, grads):
        """The fast kernels when this step can update the flat groups: the fast path is (still)
        on and every parameter and gradient is an array of the groups' kind; else None."""
        if self._groups is None:
            return None
        kind = type(self._groups[0][2])
        if any(type(grads[n]) is not kind or type(self.params[n]) is not kind for n in self.names):
            return None
        return backend.fused(backend.namespace(self._groups[0][2]))

    def step(self, grads: dict, lr: float | None = None) -> None:
        """One AdamW update of every parameter; ``grads`` must hold a gradient for each one
        (and none for model state)."""
        if not isinstance(grads, dict):
            raise TypeError(f"grads must be a dict of arrays, got {type(grads).__name__}")
        missing = [n for n in self.names if n not in grads]
        extra = [n for n in grads if n not in self.decay]
        if missing or extra:
            raise KeyError(f"grads must have exactly the keys of params; missing {missing}, "
                           f"unexpected {extra}")
        for name, g in grads.items():
            p = self.params[name]
            check_array(g, f"grads[{name!r}]")
            if tuple(g.shape) != tuple(p.shape) or g.dtype != p.dtype:
                raise ValueError(f"grads[{name!r}] has shape {tuple(g.shape)} and dtype {g.dtype};"
                                 f" expected {tuple(p.shape)} and {p.dtype} like the parameter")
        lr = self.lr if lr is None else float(lr)
        b1, b2 = self.betas
        self.t += 1
        bc1 = 1.0 - b1 ** self.t  # Python floats: no float64 arrays in a float32 path
        bc2 = 1.0 - b2 ** self.t
        fast = self._flat_path(grads)
        if fast is not None:
            for names, wd, m, v in self._groups:
                new = fast.adamw_update_flat([self.params[n] for n in names],
                                             [grads[n] for n in names], m, v, b1=b1, b2=b2,
                                             lr=lr, wd=wd, eps=self.eps, bc1=bc1, bc2=bc2)
                self.params.update(zip(names, new))
            return
        for name, g in grads.items():
            xp = backend.namespace(g)
            m, v, p = self.m[name], self.v[name], self.params[name]
            fast = backend.fused(xp)
            if fast is not None:     # NumPy: the same update with no temporaries (tostnp.backend.kernels)
                self.params[name] = fast.adamw_update(
                    p, g, m, v, b1=b1, b2=b2, lr=lr, wd=self.decay[name], eps=self.eps,
                    bc1=bc1, bc2=bc2)
                continue
            # m and v belong to the optimizer, so in-place updates are safe (and save memory).
            m *= b1
            m += (1.0 - b1) * g
            g2 = g * g
            g2 *= 1.0 - b2
            v *= b2
            v += g2
            # lr * mhat / (sqrt(vhat) + eps), with in-place work on our own temporaries
            denom = xp.sqrt(v)
            denom *= 1.0 / math.sqrt(bc2)  # sqrt(vhat) = sqrt(v) / sqrt(1 - beta2**t)
            denom += self.eps
            delta = m / denom  # (same shape as p)
            delta *= lr / bc1
            wd = self.decay[name]
            # New parameter array, not in place: arrays the caller still holds (caches, tied
            # views) are never modified behind its back.
            new_p = p * (1.0 - lr * wd) if wd else xp.asarray(p, copy=True)
            new_p -= delta
            self.params[name] = new_p

    # --- checkpoints -----------------------------------------------------------------------
    def state_dict(self) -> dict:
        """``{"step": int, "arrays": {"m.<name>": array, "v.<name>": array, ...}}`` (copies)."""
        arrays = {}
        for name in self.names:
            xp = backend.namespace(self.m[name])
            arrays[f"m.{name}"] = xp.asarray(self.m[name], copy=True)
            arrays[f"v.{name}"] = xp.asarray(self.v[name], copy=True)
        return {"step": self.t, "arrays": arrays}

    def load_state_dict(self, d: dict) -> None:
        """Restore from :meth:`state_dict` output; arrays may be host NumPy arrays (from a
        checkpoint) and are moved to each parameter's namespace, device and dtype."""
        if not isinstance(d, dict) or "step" not in d or "arrays" not in d:
            raise ValueError("optimizer state must be a dict with keys 'step' and 'arrays'")
        step = d["step"]
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"optimizer state 'step' must be an int >= 0, got {step!r}")
        arrays = d["arrays"]
        new_m, new_v = {}, {}
        for name in self.names:
            p = self.params[name]
            xp, dev = backend.namespace(p), backend.device_of(p)
            for kind, store in (("m", new_m), ("v", new_v)):
                key = f"{kind}.{name}"
                if key not in arrays:
                    raise KeyError(f"optimizer state is missing {key!r}")
                a = arrays[key]
                if tuple(a.shape) != tuple(p.shape):
                    raise ValueError(f"optimizer state {key!r} has shape {tuple(a.shape)}, "
                                     f"expected {tuple(p.shape)}")
                if backend.namespace(a) is not xp:
                    a = backend.from_host(xp, backend.to_host(a), dtype=p.dtype, device=dev)
                elif a.dtype != p.dtype:
                    raise ValueError(f"optimizer state {key!r} has dtype {a.dtype}, "
                                     f"expected {p.dtype}")
                store[name] = xp.asarray(a, copy=True)  # own it: updated in place later
        if self._groups is not None:         # into the groups' flat buffers, through the views
            for name in self.names:
                self.m[name][...] = new_m[name]
                self.v[name][...] = new_v[name]
            self.t = step
            return
        self.m, self.v, self.t = new_m, new_v, step
