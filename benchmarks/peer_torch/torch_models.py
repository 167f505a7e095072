"""The PyTorch models of the peer benchmark, written from tostnp's documented semantics
(tostnp/nn/tssa.py, block.py, class_attention.py, models/lm.py and vision.py): TSSA, the ToST
block, the LM (nanoGPT layout, tied head) and the vision model (patch stem, class-attention
pooling). Defined on first use, so that the tostnp worker never imports torch."""
from __future__ import annotations

_T = {}


def torch_defs():
    """Import torch and define the modules once (the tostnp worker never calls this)."""
    if _T:
        return _T
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class TSSA(nn.Module):
        """Token Statistics Self-Attention, tostnp/nn/tssa.py semantics, plain eager PyTorch.

        w = x W_u + b_u; sq = w^2; Pi = softmax over heads of temp_k * q_nk with
        q_nk = sum_{c in k} sq_nc / S1_c (S1 = token sum of sq, causal: prefix sum, + p *
        denom_bias[k, t]); m = (Pi-weighted token sum of sq) / (sum Pi + 1e-8) (causal: prefix
        sums); out = -w Pi / (1 + m); y = out W_o + b_o.
        """

        def __init__(self, C, h, causal=False, max_len=None, bias=True):
            super().__init__()
            self.C, self.h, self.p, self.causal = C, h, C // h, causal
            self.W_u = nn.Linear(C, C, bias=bias)
            self.temp = nn.Parameter(torch.ones(h, 1))
            self.W_o = nn.Linear(C, C, bias=bias)
            if causal:
                self.denom_bias = nn.Parameter(torch.zeros(h, max_len, 1))

        def forward(self, x):
            B, N, C = x.shape
            h, p = self.h, self.p
            w = self.W_u(x)                                                  # (B, N, C)
            sq = w * w
            if self.causal:
                S1 = torch.cumsum(sq, dim=1).clamp_min(1e-12)                # (B, N, C)
                q = (sq / S1).view(B, N, h, p).sum(-1) \
                    + p * self.denom_bias[:, :N, 0].t()                      # (B, N, h)
            else:
                S1 = sq.sum(dim=1, keepdim=True).clamp_min(1e-24)            # (B, 1, C)
                q = (sq / S1).view(B, N, h, p).sum(-1)                       # (B, N, h)
            Pi = torch.softmax(q * self.temp.view(1, 1, h), dim=-1)          # (B, N, h)
            w4 = w.view(B, N, h, p)
            a = w4 * Pi.unsqueeze(-1)                                        # w Pi
            aw = a * w4                                                      # Pi w^2
            if self.causal:
                S2 = torch.cumsum(aw, dim=1)                                 # (B, N, h, p)
                D = torch.cumsum(Pi, dim=1) + 1e-8                           # (B, N, h)
                m = S2 / D.unsqueeze(-1)
            else:
                S2 = aw.sum(dim=1, keepdim=True)                             # (B, 1, h, p)
                D = Pi.sum(dim=1) + 1e-8                                     # (B, h)
                m = S2 / D.view(B, 1, h, 1)
            out = -a / (1.0 + m)                                             # (B, N, h, p)
            return self.W_o(out.reshape(B, N, C))

    class ToSTBlock(nn.Module):
        """x1 = x + ls1 * TSSA(LN1(x));  y = x1 + ls2 * MLP(LN2(x1)), MLP = fc2(GELU_tanh(fc1))."""

        def __init__(self, C, h, *, causal, max_len=None, bias=True, ls_init=1.0,
                     mlp_ratio=4, eps=1e-6):
            super().__init__()
            H = mlp_ratio * C
            self.ln1 = nn.LayerNorm(C, eps=eps)
            self.tssa = TSSA(C, h, causal=causal, max_len=max_len, bias=bias)
            self.ls1 = nn.Parameter(torch.full((C,), float(ls_init)))
            self.ln2 = nn.LayerNorm(C, eps=eps)
            self.fc1 = nn.Linear(C, H, bias=bias)
            self.fc2 = nn.Linear(H, C, bias=bias)
            self.ls2 = nn.Parameter(torch.full((C,), float(ls_init)))

        def forward(self, x):
            x = x + self.ls1 * self.tssa(self.ln1(x))
            return x + self.ls2 * self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))

    class ToSTLM(nn.Module):
        """nanoGPT layout: wte + wpe, causal ToST blocks, final LN, head tied to wte."""

        def __init__(self, cfg):
            super().__init__()
            C = cfg.width
            self.wte = nn.Embedding(cfg.vocab_size, C)
            self.wpe = nn.Embedding(cfg.block_size, C)
            self.blocks = nn.ModuleList([
                ToSTBlock(C, cfg.num_heads, causal=True, max_len=cfg.block_size, bias=False,
                          ls_init=cfg.layer_scale_init, mlp_ratio=cfg.mlp_ratio, eps=cfg.ln_eps)
                for _ in range(cfg.depth)])
            self.ln_f = nn.LayerNorm(C, eps=cfg.ln_eps)

        def forward(self, ids):
            T = ids.shape[1]
            x = self.wte(ids) + self.wpe(torch.arange(T, device=ids.device))
            for blk in self.blocks:
                x = blk(x)
            return F.linear(self.ln_f(x), self.wte.weight)                  # (B, T, V) tied

    class ClassAttnBlock(nn.Module):
        """Class-attention block (tostnp/nn/class_attention.py): only the CLS token is a query.
        form "published": XCiT's block with tokens_norm=True (the patch tokens are re-normalised
        and passed on); "cls-only": CaiT's block, which updates the CLS token alone."""

        def __init__(self, C, h, mlp_ratio, ls_init, eps, form="published"):
            super().__init__()
            self.form = form
            self.h, self.p = h, C // h
            self.norm1 = nn.LayerNorm(C, eps=eps)
            self.q = nn.Linear(C, C)
            self.kv = nn.Linear(C, 2 * C)
            self.proj = nn.Linear(C, C)
            self.ls1 = nn.Parameter(torch.full((C,), float(ls_init)))
            self.norm2 = nn.LayerNorm(C, eps=eps)
            self.fc1 = nn.Linear(C, mlp_ratio * C)
            self.fc2 = nn.Linear(mlp_ratio * C, C)
            self.ls2 = nn.Parameter(torch.full((C,), float(ls_init)))

        def forward(self, cls, tokens):
            B, N, C = tokens.shape
            h, p = self.h, self.p
            u = self.norm1(torch.cat([cls, tokens], dim=1))                  # (B, 1+N, C)
            q = self.q(u[:, :1]).view(B, 1, h, p).transpose(1, 2)            # (B, h, 1, p)
            k, v = self.kv(u).view(B, N + 1, 2, h, p).permute(2, 0, 3, 1, 4)  # (B, h, 1+N, p)
            o = F.scaled_dot_product_attention(q, k, v)                      # (B, h, 1, p)
            a = self.proj(o.transpose(1, 2).reshape(B, 1, C))                # (B, 1, C)
            if self.form == "published":
                y = self.norm2(torch.cat([cls, tokens], dim=1)
                               + self.ls1 * torch.cat([a, u[:, 1:]], dim=1))   # all tokens
                c, tokens = y[:, :1], 2.0 * y[:, 1:]
            else:
                c = self.norm2(cls + self.ls1 * a)
                cls = cls + self.ls1 * a
            out = (c if self.form == "published" else cls) + \
                self.ls2 * self.fc2(F.gelu(self.fc1(c), approximate="tanh"))
            return out, tokens

    class ToSTVision(nn.Module):
        """ViT patch stem + learned positions, ToST blocks, class-attention pooling, LN, head."""

        def __init__(self, cfg):
            super().__init__()
            assert cfg.pool == "cls" and cfg.stem == "linear" and cfg.pos == "learned" \
                and cfg.gelu == "tanh" and cfg.num_registers == 0 and cfg.mixer == "tssa", cfg
            C, P = cfg.width, cfg.patch_size
            self.cfg = cfg
            self.patch = nn.Linear(P * P * cfg.in_chans, C)
            self.pos_embed = nn.Parameter(torch.zeros(1, cfg.num_patches, C))
            self.blocks = nn.ModuleList([
                ToSTBlock(C, cfg.num_heads, causal=False, bias=True,
                          ls_init=cfg.layer_scale_init, mlp_ratio=cfg.mlp_ratio, eps=cfg.ln_eps)
                for _ in range(cfg.depth)])
            self.cls_token = nn.Parameter(torch.zeros(1, 1, C))
            self.cab = nn.ModuleList([
                ClassAttnBlock(C, cfg.num_heads, cfg.mlp_ratio, cfg.layer_scale_init, cfg.ln_eps,
                               form=cfg.cab)
                for _ in range(cfg.num_cls_blocks)])
            self.norm = nn.LayerNorm(C, eps=cfg.ln_eps)
            self.head = nn.Linear(C, cfg.num_classes)

        def forward(self, images):                                          # (B, H, W, Cin)
            B, H, W, Cin = images.shape
            P = self.cfg.patch_size
            Hp, Wp = H // P, W // P
            patches = images.reshape(B, Hp, P, Wp, P, Cin).permute(0, 1, 3, 2, 4, 5) \
                .reshape(B, Hp * Wp, P * P * Cin)                            # (B, N, P*P*Cin)
            x = self.patch(patches) + self.pos_embed
            for blk in self.blocks:
                x = blk(x)
            cls = self.cls_token.expand(B, -1, -1)
            for c in self.cab:
                cls, x = c(cls, x)
            return self.head(self.norm(cls[:, 0]))

    _T.update(torch=torch, nn=nn, F=F, TSSA=TSSA, ToSTBlock=ToSTBlock, ToSTLM=ToSTLM,
              ToSTVision=ToSTVision)
    return _T
