"""WaveGlow (Prenger, Valle and Catanzaro, "WaveGlow: A Flow-based Generative Network for Speech
Synthesis", ICASSP 2019, arXiv:1811.00002) as NVIDIA DeepLearningExamples' Tacotron2/WaveGlow
recipe builds it, which FlagPerf's WaveGlow case copies (training/benchmarks/WaveGlow/pytorch/
model/model.py); written here from the paper and that architecture.

Shapes: ``B`` batch, ``S`` audio samples (a multiple of ``n_group``), ``F`` mel frames
(``S // hop + 1`` for the recipe's STFT), ``M`` = ``n_mel_channels``, ``G`` = ``n_group``,
``T = S / G`` groups.

* The mel spectrogram ``[B, M, F]`` is upsampled to the audio rate by a transposed convolution
  (kernel 1024, stride 256: one STFT window and hop), cut to ``S`` samples, and folded like the
  audio: ``[B, M x G, T]`` conditions every coupling layer.
* The audio ``[B, S]`` is folded into ``G`` channels ``[B, G, T]`` and goes through ``n_flows``
  steps of flow, each an invertible 1x1 convolution (a ``c x c`` matrix initialised orthonormal
  with determinant +1) then an affine coupling layer: the first half of the channels ``x_a``
  is kept, the second becomes ``exp(log_s) * x_b + t`` with ``(t, log_s) = WN(x_a, mel)``.
* WN is WaveNet-like: a 1x1 start convolution to ``n_channels``, ``n_layers`` non-causal
  dilated convolutions (dilation 2^i, gated tanh x sigmoid with the mel's 1x1 projection
  added), residual and skip 1x1 convolutions, and a 1x1 end convolution to ``t`` and ``log_s``
  initialised to zero (each coupling starts as the identity). Every convolution but the end is
  weight-normalised.
* Every ``n_early_every`` flows, ``n_early_size`` channels leave early (the multi-scale
  architecture of Real NVP / Glow); the output ``z`` ``[B, G, T]`` is them and the rest.

The loss (``waveglow_loss``) is the negative log-likelihood of the audio under a Gaussian of
standard deviation ``sigma`` for ``z`` (paper, eq. 4-5), per audio sample.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch
from torch import nn
from torch.nn.utils.parametrizations import weight_norm

#: NVIDIA's WaveGlow for LJSpeech at 22050 Hz (DeepLearningExamples' ``waveglow/arg_parser.py``
#: defaults, as FlagPerf's ``model_parser.py``): its config keys and values.
DEFAULTS = {"n_mel_channels": 80, "n_flows": 12, "n_group": 8, "n_early_every": 4,
            "n_early_size": 2, "wn_layers": 8, "wn_channels": 512, "wn_kernel_size": 3,
            "upsample_kernel": 1024, "hop_length": 256}

FlowOutput = tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]


class Invertible1x1Conv(nn.Module):
    """A ``c x c`` matrix ``W`` mixing the channels of ``[B, c, T]``, with its log-determinant.

    ``W`` starts as a random orthonormal matrix (QR of a Gaussian one) with determinant +1
    (paper, section 2.2), so ``log|det W| = 0`` at the start.
    """

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(channels, channels))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.weight.is_meta:
            return
        with torch.no_grad():
            q, _ = torch.linalg.qr(torch.randn_like(self.weight))
            if torch.det(q) < 0:
                q[:, 0] = -q[:, 0]
            self.weight.copy_(q)

    def _wide(self) -> torch.Tensor:
        # Determinants and inverses in fp32 at least (fp16 weights: a model cast to half).
        return self.weight.to(torch.promote_types(self.weight.dtype, torch.float32))

    def forward(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``z [B, c, T]`` -> ``(W z [B, c, T], B x T x log|det W|)`` (a scalar, fp32 or
        wider)."""
        batch, _, groups = z.shape
        log_det = batch * groups * torch.linalg.slogdet(self._wide())[1]
        return torch.einsum("ij,bjt->bit", self.weight.to(z.dtype), z), log_det

    def inverse(self, z: torch.Tensor) -> torch.Tensor:
        """``W^-1 z`` for ``z [B, c, T]``."""
        inverse = torch.linalg.inv(self._wide()).to(z.dtype)
        return torch.einsum("ij,bjt->bit", inverse, z)


class WN(nn.Module):
    """The coupling network: ``(x_a [B, n_in, T], mel [B, n_cond, T]) -> [B, 2 n_in, T]``, the
    shift ``t`` (first ``n_in`` channels) and ``log_s`` (last ``n_in``)."""

    def __init__(self, n_in: int, n_cond: int, n_layers: int, n_channels: int,
                 kernel_size: int) -> None:
        super().__init__()
        if kernel_size % 2 == 0:
            raise ValueError(f"wn_kernel_size {kernel_size}: must be odd (centred convolutions)")
        self.n_channels = n_channels
        self.start = weight_norm(nn.Conv1d(n_in, n_channels, 1))
        self.in_layers = nn.ModuleList()
        self.cond_layers = nn.ModuleList()
        self.res_skip_layers = nn.ModuleList()
        for i in range(n_layers):
            dilation = 2 ** i
            self.in_layers.append(weight_norm(nn.Conv1d(
                n_channels, 2 * n_channels, kernel_size, dilation=dilation,
                padding=dilation * (kernel_size - 1) // 2)))
            self.cond_layers.append(weight_norm(nn.Conv1d(n_cond, 2 * n_channels, 1)))
            # The last layer has no residual output, only the skip one.
            out = 2 * n_channels if i < n_layers - 1 else n_channels
            self.res_skip_layers.append(weight_norm(nn.Conv1d(n_channels, out, 1)))
        self.end = nn.Conv1d(n_channels, 2 * n_in, 1)
        nn.init.zeros_(self.end.weight)
        nn.init.zeros_(self.end.bias)

    def forward(self, audio: torch.Tensor, mel: torch.Tensor) -> torch.Tensor:
        x = self.start(audio)
        c = self.n_channels
        skip = 0
        last = len(self.in_layers) - 1
        for i, (conv, cond, res_skip) in enumerate(zip(self.in_layers, self.cond_layers,
                                                       self.res_skip_layers)):
            pre = conv(x) + cond(mel)
            acts = res_skip(torch.tanh(pre[:, :c]) * torch.sigmoid(pre[:, c:]))
            if i < last:
                x = x + acts[:, :c]
                skip = skip + acts[:, c:]
            else:
                skip = skip + acts
        return self.end(skip)


class WaveGlow(nn.Module):
    """WaveGlow (see the module docstring). ``forward(mel, audio)`` gives ``(z, log_s list,
    log_det_W list)``; ``reverse(z, mel)`` inverts it; ``infer(mel, sigma)`` samples audio.

    Raises:
        ValueError: ``n_group`` or ``n_early_size`` odd, or the early outputs would use up the
            channels.
    """

    def __init__(self, n_mel_channels: int, n_flows: int, n_group: int, n_early_every: int,
                 n_early_size: int, wn_layers: int, wn_channels: int, wn_kernel_size: int,
                 upsample_kernel: int = 1024, hop_length: int = 256) -> None:
        super().__init__()
        if n_group % 2 or n_early_size % 2:
            raise ValueError(f"n_group {n_group} and n_early_size {n_early_size} must be even")
        self.n_group, self.n_flows = n_group, n_flows
        self.n_early_every, self.n_early_size = n_early_every, n_early_size
        self.upsample = nn.ConvTranspose1d(n_mel_channels, n_mel_channels, upsample_kernel,
                                           stride=hop_length)
        self.convinv = nn.ModuleList()
        self.WN = nn.ModuleList()
        remaining = n_group
        for k in range(n_flows):
            if k and k % n_early_every == 0:
                remaining -= n_early_size
            if remaining < 2:
                raise ValueError(f"n_group {n_group}: no channels left at flow {k}")
            self.convinv.append(Invertible1x1Conv(remaining))
            self.WN.append(WN(remaining // 2, n_mel_channels * n_group, wn_layers, wn_channels,
                              wn_kernel_size))
        self.n_remaining_channels = remaining

    def _condition(self, mel: torch.Tensor, samples: int) -> torch.Tensor:
        """``mel [B, M, F]`` -> ``[B, M x G, samples / G]``, upsampled and cut to ``samples``."""
        up = self.upsample(mel)
        if up.shape[2] < samples:
            raise ValueError(f"{mel.shape[2]} mel frames upsample to {up.shape[2]} < {samples} "
                             "audio samples")
        up = up[:, :, :samples].unfold(2, self.n_group, self.n_group)  # [B, M, T, G]
        return up.permute(0, 1, 3, 2).reshape(up.shape[0], -1, up.shape[2])

    def forward(self, mel: torch.Tensor, audio: torch.Tensor) -> FlowOutput:
        """``mel [B, M, F]``, ``audio [B, S]`` -> ``(z [B, G, S/G], [log_s [B, c_k/2, S/G]] x
        n_flows, [log|det W_k| x B x T] x n_flows)``."""
        cond = self._condition(mel, audio.shape[1])
        x = audio.unfold(1, self.n_group, self.n_group).transpose(1, 2)  # [B, G, T]
        early, log_s_list, log_det_list = [], [], []
        for k in range(self.n_flows):
            if k and k % self.n_early_every == 0:
                early.append(x[:, :self.n_early_size])
                x = x[:, self.n_early_size:]
            x, log_det = self.convinv[k](x)
            half = x.shape[1] // 2
            x_a, x_b = x[:, :half], x[:, half:]
            out = self.WN[k](x_a, cond)
            shift, log_s = out[:, :half], out[:, half:]
            x = torch.cat([x_a, torch.exp(log_s) * x_b + shift], 1)
            log_s_list.append(log_s)
            log_det_list.append(log_det)
        return torch.cat(early + [x], 1), log_s_list, log_det_list

    def reverse(self, z: torch.Tensor, mel: torch.Tensor) -> torch.Tensor:
        """The inverse of :meth:`forward`: ``z [B, G, T]``, ``mel [B, M, F]`` -> ``[B, G x T]``."""
        cond = self._condition(mel, z.shape[1] * z.shape[2])
        # The early channels, last out first back in.
        n_early = [k for k in range(1, self.n_flows) if k % self.n_early_every == 0]
        x = z[:, len(n_early) * self.n_early_size:]
        for k in reversed(range(self.n_flows)):
            half = x.shape[1] // 2
            x_a, y_b = x[:, :half], x[:, half:]
            out = self.WN[k](x_a, cond)
            shift, log_s = out[:, :half], out[:, half:]
            x = self.convinv[k].inverse(torch.cat([x_a, (y_b - shift) * torch.exp(-log_s)], 1))
            if k in n_early:
                i = n_early.index(k)
                x = torch.cat([z[:, i * self.n_early_size:(i + 1) * self.n_early_size], x], 1)
        return x.transpose(1, 2).reshape(x.shape[0], -1)

    @torch.no_grad()
    def infer(self, mel: torch.Tensor, sigma: float = 1.0) -> torch.Tensor:
        """Audio ``[B, F x hop]`` for ``mel [B, M, F]``, from ``z ~ N(0, sigma^2)``."""
        samples = mel.shape[2] * self.upsample.stride[0]
        z = sigma * torch.randn(mel.shape[0], self.n_group, samples // self.n_group,
                                device=mel.device, dtype=mel.dtype)
        return self.reverse(z, mel)


def waveglow_loss(output: FlowOutput, sigma: float = 1.0) -> torch.Tensor:
    """NVIDIA's ``WaveGlowLoss``: ``(sum z^2 / (2 sigma^2) - sum log_s - sum log|det W|) / (B x
    G x T)``, the negative log-likelihood per audio sample in nats without the constant
    ``log(sigma sqrt(2 pi))`` (paper, eq. 4-5). A scalar in fp32 (fp64 for an fp64 model)."""
    z, log_s_list, log_det_list = output
    wide = torch.promote_types(z.dtype, torch.float32)  # sums in fp32 at least
    z = z.to(wide)
    total = (z * z).sum() / (2 * sigma * sigma)
    total = total - sum(log_s.to(wide).sum() for log_s in log_s_list) - sum(log_det_list)
    return total / z.numel()


def build_model(config: Mapping[str, Any], data_dir: str | None = None) -> WaveGlow:
    """WaveGlow from ``config`` (keys of ``DEFAULTS``; missing or null: NVIDIA's values; the
    mel's ``hop_length`` is the upsampling stride). ``data_dir`` is unused (no checkpoint).

    Raises:
        ValueError: see :class:`WaveGlow`.
    """
    value = {key: config.get(key) if config.get(key) is not None else default
             for key, default in DEFAULTS.items()}
    return WaveGlow(**{key: int(v) for key, v in value.items()})
