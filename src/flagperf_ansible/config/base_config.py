"""The parameters of the base micro-benchmarks (``benchmarks/base/<case>/pytorch/config/``),
checked on the controller once a round's configuration is put together (standard, profile,
vendor): the cases read them only when they run on the hosts.

One model holds every base parameter; a case has the ones its ``config/standard.yaml`` lists
(unknown keys are refused there, by ``cases.vendor_overrides`` and ``cases.profile_of``).
The sizes follow FlagPerf's and nccl-tests' (``-b``/``-e``/``-f``): ``min_bytes`` <=
``max_bytes``, a growth ``factor`` over 1.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from flagperf_ansible.config.casespec import NAME_PATTERN, not_bool
from flagperf_ansible.config.errors import ConfigError, raise_first

#: The precisions of the computation case (FlagPerf's computation-<PRECISION> cases).
Precision = Literal["fp64", "fp32", "tf32", "fp16", "bf16", "int8"]
Int = Annotated[int, BeforeValidator(not_bool)]
#: Finite by construction: a YAML ``.inf`` or ``1e999`` is not an int.
Number = Annotated[float, BeforeValidator(not_bool), Field(allow_inf_nan=False)]

#: Bounds far beyond any device's, low enough to catch a typo's extra digits.
MAX_BYTES = 1 << 40        # 1 TiB: one message of a sweep
MAX_ITERATIONS = 10 ** 9
MAX_MATRIX = 1 << 20       # one side of a GEMM


class BaseParams(BaseModel):
    """Every base case's parameters, each optional (a case has its own subset)."""

    model_config = ConfigDict(extra="allow")

    m: Annotated[Int, Field(gt=0, le=MAX_MATRIX)] | None = None
    n: Annotated[Int, Field(gt=0, le=MAX_MATRIX)] | None = None
    k: Annotated[Int, Field(gt=0, le=MAX_MATRIX)] | None = None
    warmup: Annotated[Int, Field(ge=0, le=MAX_ITERATIONS)] | None = None
    #: A count for every precision, or a count per precision.
    iterations: (Annotated[Int, Field(gt=0, le=MAX_ITERATIONS)]
                 | dict[Precision, Annotated[Int, Field(gt=0, le=MAX_ITERATIONS)]] | None) = None
    precisions: Annotated[list[Precision], Field(min_length=1)] | None = None
    min_bytes: Annotated[Int, Field(gt=0, le=MAX_BYTES)] | None = None
    max_bytes: Annotated[Int, Field(gt=0, le=MAX_BYTES)] | None = None
    factor: Annotated[Number, Field(gt=1, le=1024)] | None = None
    size_mib: Annotated[Int, Field(gt=0, le=MAX_BYTES >> 20)] | None = None
    init_mib: Annotated[Int, Field(gt=0, le=MAX_BYTES >> 20)] | None = None
    #: 0: allocate until the device is full.
    limit_gib: Annotated[Number, Field(ge=0, le=MAX_BYTES >> 30)] | None = None
    hold_s: Annotated[Number, Field(ge=0, le=24 * 3600)] | None = None
    #: None: nccl on CUDA, gloo elsewhere; a vendor names its own (hccl, cncl, ...).
    dist_backend: Annotated[str, Field(pattern=NAME_PATTERN.pattern)] | None = None

def check_base_params(config: Mapping[str, Any], origins: Mapping[str, str]) -> None:
    """Check a base round's effective parameters.

    Args:
        config: the parameters (standard, then profile, then vendor).
        origins: the file each parameter came from.

    Raises:
        ConfigError: naming the file and key of the first bad value: out of its bounds, not
        finite, an unknown precision, a ``min_bytes`` above ``max_bytes``.
    """
    def origin(key: str) -> str:
        return origins.get(key, "")

    with raise_first(origin):
        params = BaseParams.model_validate(dict(config))
    if params.min_bytes is not None and params.max_bytes is not None \
            and params.min_bytes > params.max_bytes:
        raise ConfigError(f"above max_bytes {params.max_bytes}", origin("min_bytes"), "min_bytes")
    if params.precisions is not None:
        if len(set(params.precisions)) != len(params.precisions):
            raise ConfigError("a precision is listed twice", origin("precisions"), "precisions")
        if isinstance(params.iterations, dict):
            missing = [p for p in params.precisions if p not in params.iterations]
            if missing:
                raise ConfigError(f"no count for {', '.join(missing)}, which precisions lists",
                                  origin("iterations"), "iterations")
