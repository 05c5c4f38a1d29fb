"""LAMB (You et al. 2019, "Large Batch Optimization for Deep Learning: Training BERT in 76
minutes", algorithm 2), as apex's FusedLAMB computes it for FlagPerf's and MLPerf's BERT
(``use_nvlamb=False``, ``adam_w_mode=True``, ``bias_correction=True``, ``max_grad_norm=1.0``):

1. all gradients scaled by ``1 / max(1, ||g||_2 / max_grad_norm)``, ``||g||_2`` over every
   parameter of every group (a global clip);
2. per parameter: ``m = b1 m + (1 - b1) g``, ``v = b2 v + (1 - b2) g^2``,
   ``u = (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps) + wd p``;
3. ``p -= lr * r * u`` with the trust ratio ``r = ||p|| / ||u||`` where the group's weight
   decay is not 0 and both norms are positive, else ``r = 1`` (apex's multi_tensor_lamb
   stage 2; biases and LayerNorm, without weight decay, get Adam's step).

torch has no LAMB; this is a plain loop over tensors (the case's optimizer on every vendor
unless a vendor's ``create_optimizer`` hook gives a fused one).
"""

from __future__ import annotations

import torch


class Lamb(torch.optim.Optimizer):
    """LAMB over ``params`` (see the module docstring).

    Args:
        lr: learning rate (> 0); betas: ``(b1, b2)`` in [0, 1); eps: added to ``sqrt(v)``;
        weight_decay: decoupled decay ``wd`` (>= 0), per group; max_grad_norm: the global
        clip (0 or less: none).

    Raises:
        ValueError: an argument out of range.
    """

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-6, weight_decay: float = 0.01, max_grad_norm: float = 1.0):
        if lr <= 0 or eps < 0 or weight_decay < 0 or not all(0 <= b < 1 for b in betas):
            raise ValueError(f"LAMB: lr {lr}, betas {betas}, eps {eps}, weight_decay "
                             f"{weight_decay}: out of range")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay))
        self.max_grad_norm = max_grad_norm

    @torch.no_grad()
    def step(self, closure=None):
        """One update from the parameters' ``.grad``; returns ``closure()``'s loss if given."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        grads = [p.grad for group in self.param_groups for p in group["params"]
                 if p.grad is not None]
        if not grads:
            return loss
        scale = 1.0
        if self.max_grad_norm > 0:
            norm = torch.linalg.vector_norm(
                torch.stack([torch.linalg.vector_norm(g.float()) for g in grads]))
            scale = torch.clamp(norm / self.max_grad_norm, min=1.0)
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad.float() / scale
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p, dtype=torch.float32)
                    state["exp_avg_sq"] = torch.zeros_like(p, dtype=torch.float32)
                state["step"] += 1
                m, v, t = state["exp_avg"], state["exp_avg_sq"], state["step"]
                m.mul_(b1).add_(grad, alpha=1 - b1)
                v.mul_(b2).addcmul_(grad, grad, value=1 - b2)
                update = (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + group["eps"])
                weights = p.float()
                if group["weight_decay"] != 0:
                    update.add_(weights, alpha=group["weight_decay"])
                    w_norm = torch.linalg.vector_norm(weights)
                    u_norm = torch.linalg.vector_norm(update)
                    ratio = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm,
                                        torch.ones_like(w_norm))
                    update.mul_(ratio)
                p.add_(update.to(p.dtype), alpha=-group["lr"])
        return loss


def bert_param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """FlagPerf's two groups (trainer_adapter.create_optimizer): parameters whose name holds
    ``bias``, ``gamma``, ``beta`` or ``LayerNorm`` without weight decay, the rest with it."""
    no_decay = ("bias", "gamma", "beta", "LayerNorm")
    named = list(model.named_parameters())
    return [{"params": [p for n, p in named if not any(k in n for k in no_decay)],
             "weight_decay": weight_decay},
            {"params": [p for n, p in named if any(k in n for k in no_decay)],
             "weight_decay": 0.0}]
