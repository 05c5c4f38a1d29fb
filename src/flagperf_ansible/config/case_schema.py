"""The case contract: the schema of ``case.yml`` and of a case's configuration files.

Every case of every suite declares, in ``case.yml`` (unknown keys are errors):

* ``suite`` (``flagperf_ansible.config.suites``), ``description``, ``launcher``
  (a name of ``flagperf_ansible.config.launchers.LAUNCHERS``), ``timeout`` (s);
* what runs, one of: ``driver``, the module (dotted, importable with ``benchmarks/`` on the
  path: ``driver.torch.classification``, or a module of the case folder itself such as
  ``bert.pytorch.pretraining``) whose ``run(case)`` the one entry ``python -m driver.run``
  calls (``benchmarks/driver/run.py``), with ``model``, the model's builder by import path
  (a kept library's, e.g. ``torchvision.models.resnet50``, or the case's own ``model.py``'s)
  and, for a library builder, its keyword ``arguments`` taken from configuration keys; or
  ``entry``, a file of the case folder run as it is (micro-benchmarks, ``binary``);
* ``metrics``: the figures it reports in FINISHED, each by its FINISHED key with its direction
  (``higher`` or ``lower`` is better), unit and meaning (for base cases, the formula), and for
  base figures the vendor datasheet entry it is compared with (``datasheet``,
  ``datasheet_across_nodes``; ``flagperf_ansible.config.datasheet``);
* ``kind`` (training): ``convergence`` (the default: trained to a target, FlagPerf's classic
  cases) or ``llm`` (a fixed number of steps, FlagPerf's LLM cases: the round passes when it
  ran every step and its loss curve is within the bound of its reference curve, its
  ``target`` being that curve error; without a reference curve, on throughput only);
* ``speed_index``: an LLM case's speed index in the layout of the Megatron reproduction seed
  (``flagperf_ansible.results.speed_index``), written beside each round's round.json;
* ``target``: for training, the convergence target (metric, comparison, the config key holding
  the value); for inference, the accuracy bound; base cases have none;
* ``also_targets``: a training case's further targets, each in effect where its config key is
  set (not null): convergence then needs every target (e.g. a profile's target on the
  validation loss, beside a metric that cannot tell learning alone);
* ``throughput``: the FINISHED figure of throughput, its unit (samples, sequences, tokens,
  images, mel_frames, audio_samples, queries, bytes, flop) and the FINISHED key counting the
  units of work (energy per unit divides by it);
* ``mfu``: which throughput figure MFU takes and the FLOPs per unit with their source: a constant,
  a constant scaled by a config key (``scale_key``, ``reference``, ``exponent``), or a formula of
  config keys (``formula``: + - * / ** and parentheses over numbers and key names, parsed, never
  evaluated as code); ``precision_peak`` maps the config ``precision`` to a datasheet precision;
* ``monitoring``: the PerfLog events that open and close the monitoring window;
* ``requirements``, ``env``: per-case extra packages and environment;
* ``data``: the data-set format (``flagperf_ansible.datasets``), or null for a case that needs
  none; ``checkpoint``: an initial checkpoint under the data folder with its SHA-256 (or
  ``unpinned``: why none can be given);
* ``large_artifacts``: files the case writes that ``collect`` leaves out (tar patterns);
* ``references``: figures published for the case (FlagPerf's, measured on nvidia A100), each
  for one ``vendor``, ``hardware``, ``nnodes`` and ``nproc_per_node`` (at most one entry per
  four), with its ``precision`` (if one applies), ``figures`` (FINISHED key -> published
  value, in the unit of that figure: p_whole, p_train, p_core, e2e_time or a key of
  ``metrics``), ``source`` (where it was published), an optional ``label`` (default
  ``FlagPerf's <hardware> <n>x<m>``) and ``note``. The summary sets a round on the standard configuration beside the matching one.

``config/standard.yaml``: ``params`` (the standard configuration), ``mutable`` (the keys a
vendor may override, a subset of ``params``), ``fixed`` (keys a profile may not change either,
such as the optimizer type). ``config/<hardware>.yaml``: a profile, ``profile`` (what it is,
what it ``reduces``, its ``baselines`` and the topologies it holds at, ``scaling``), ``params``
(the keys it changes) and optionally its own ``checkpoint``.
"""

from __future__ import annotations

import ast
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationInfo, \
    field_validator, model_validator

from flagperf_ansible.config.casespec import check_name, check_path, not_bool
from flagperf_ansible.config.datasheet import check_figure_unit
from flagperf_ansible.config.settings import check_env
from flagperf_ansible.config.suites import SUITES

#: Units a throughput is counted in (per second).
THROUGHPUT_UNITS = ("samples", "sequences", "tokens", "images", "mel_frames", "audio_samples",
                    "queries", "bytes", "flop")
#: FINISHED keys and config keys: identifiers, as FlagPerf's ``throughput(ips)_raw`` aside.
KEY_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_()]*")
#: What a profile may declare it shrinks.
REDUCTIONS = ("layers", "hidden size", "width", "heads", "image size", "sequence length",
              "vocabulary", "data set", "epochs", "steps", "batch size", "augmentation",
              "checkpoint")

Positive = Annotated[float, BeforeValidator(not_bool), Field(gt=0)]


def _key(value: str) -> str:
    if not isinstance(value, str) or not KEY_PATTERN.fullmatch(value):
        raise ValueError(f"{value!r} is not a figure or config key name")
    return value


def _keys_of(value: dict[str, Any]) -> dict[str, Any]:
    """A mapping whose keys must be figure or config key names."""
    for key in value:
        _key(key)
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Metric(_Strict):
    """One figure the case reports in FINISHED, by its key (e.g. ``final_acc1``)."""

    direction: Literal["higher", "lower"]
    unit: str = ""
    description: str = ""
    #: The vendor datasheet entry the figure is compared with (``flagperf_ansible.config.datasheet``:
    #: ``peak_flops.<precision>``, ``memory_bandwidth``, ...); ``unit`` must then be one of
    #: ``datasheet.UNITS`` of the entry's dimension.
    datasheet: str | None = None
    #: The entry it is compared with when the round spans several nodes (e.g. all-reduce:
    #: ``network_bandwidth`` instead of ``interconnect_bandwidth``).
    datasheet_across_nodes: str | None = None

    @model_validator(mode="after")
    def _datasheet(self) -> "Metric":
        for entry in (self.datasheet, self.datasheet_across_nodes):
            if entry:
                check_figure_unit(entry, self.unit)
        if self.datasheet_across_nodes and not self.datasheet:
            raise ValueError("datasheet_across_nodes needs datasheet (the entry within a node)")
        return self


class Target(_Strict):
    """``metric`` (a FINISHED key of ``metrics``) must be ``comparison`` the target value, which
    is the config key ``config_key`` (e.g. ``target_acc1``) and FINISHED's ``target_<name>``."""

    metric: str
    comparison: Literal[">=", "<="]
    config_key: str

    _keys = field_validator("metric", "config_key")(_key)


class Throughput(_Strict):
    figure: str = "p_train"
    unit: Literal[THROUGHPUT_UNITS] = "samples"
    #: The FINISHED key counting the units of work over the window (all ranks).
    count: str = "num_trained_samples"

    _keys = field_validator("figure", "count")(_key)


class Flops(_Strict):
    """FLOPs per unit of throughput for MFU, with where the count comes from."""

    source: str = Field(min_length=1)
    value: Positive | None = None
    scale_key: str | None = None
    reference: Positive | None = None
    exponent: Positive = 2.0
    formula: str | None = None

    @model_validator(mode="after")
    def _one_form(self) -> "Flops":
        if (self.value is None) == (self.formula is None):
            raise ValueError("give either value (optionally with scale_key) or formula")
        if self.scale_key and self.reference is None:
            raise ValueError("scale_key needs reference: the key's value at which value holds")
        if self.formula is not None:
            formula_keys(self.formula)
        return self


_OPERATORS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow, ast.USub)


def formula_keys(formula: str) -> list[str]:
    """The config keys a FLOPs formula uses, after checking that it is arithmetic only.

    Raises:
        ValueError: not an arithmetic expression of numbers and names.
    """
    try:
        tree = ast.parse(formula, mode="eval")
    except SyntaxError:
        raise ValueError(f"formula {formula!r} is not an arithmetic expression") from None
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.append(node.id)
        elif not isinstance(node, (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant,
                                   ast.Load, *_OPERATORS)) \
                or isinstance(node, ast.Constant) and not isinstance(node.value, (int, float)):
            raise ValueError(f"formula {formula!r}: only numbers, config keys and + - * / ** ( )")
    return names


def evaluate_formula(formula: str, config: dict[str, Any]) -> float | None:
    """The formula's value for ``config`` (None when a key is missing or not a number). The
    expression is walked node by node: nothing of it is executed as code."""
    def walk(node: ast.AST) -> float:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant):
            return float(node.value)
        if isinstance(node, ast.Name):
            value = config.get(node.id)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise KeyError(node.id)
            return float(value)
        if isinstance(node, ast.UnaryOp):
            return -walk(node.operand)
        left, right = walk(node.left), walk(node.right)
        op = type(node.op)
        return {ast.Add: lambda: left + right, ast.Sub: lambda: left - right,
                ast.Mult: lambda: left * right, ast.Div: lambda: left / right,
                ast.Pow: lambda: left ** right}[op]()
    formula_keys(formula)
    try:
        return walk(ast.parse(formula, mode="eval"))
    except (KeyError, ZeroDivisionError, OverflowError):
        return None


class Mfu(_Strict):
    throughput: str = "p_train"
    flops_per_unit: Flops

    _key = field_validator("throughput")(_key)


class Window(_Strict):
    start: str
    end: str

    _keys = field_validator("start", "end")(_key)


#: A dotted import path: ``package.module`` or ``package.module.attribute``.
DOTTED_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+")


def _dotted(value: str) -> str:
    if not isinstance(value, str) or not DOTTED_PATTERN.fullmatch(value):
        raise ValueError(f"{value!r} is not a dotted import path (package.module[.name])")
    return value


class ModelSpec(_Strict):
    """The case's model: ``builder``, the import path of the function or class that builds
    it, and ``arguments``, its keywords from configuration keys (keyword -> a key, or a list
    of keys for a list of their values; a key missing from the configuration or null there
    leaves the builder's default). Without ``arguments`` the builder is the case's own and
    takes the configuration itself (``build_model(config, data_dir=..., ...)``), or, for a
    detector, it is torchvision's detector class that the detection driver completes with a
    backbone and heads (``driver.torch.detection.build_detector``). The driver adds what
    comes from the data (``num_classes``)."""

    builder: str
    arguments: dict[str, str | list[str]] | None = None

    _builder = field_validator("builder")(_dotted)

    @field_validator("arguments")
    @classmethod
    def _arguments(cls, value: dict[str, str | list[str]] | None) -> Any:
        for keyword, keys in (value or {}).items():
            _key(keyword)
            for key in [keys] if isinstance(keys, str) else keys:
                _key(key)
        return value

    def config_keys(self) -> list[str]:
        """Every configuration key ``arguments`` reads."""
        keys: list[str] = []
        for value in (self.arguments or {}).values():
            keys += [value] if isinstance(value, str) else value
        return keys


class DataSpec(_Strict):
    #: A format of the data-set registry (``flagperf-ansible data list``).
    format: str

    _format = field_validator("format")(check_name)


class Checkpoint(_Strict):
    #: Under the case's data folder.
    path: str
    #: The file's SHA-256; null only where its publisher gives none and the case cannot pin it
    #: (``unpinned`` then says why): preflight then checks that the file exists.
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    unpinned: str = ""

    _path = field_validator("path")(check_path)

    @model_validator(mode="after")
    def _pinned(self) -> "Checkpoint":
        if (self.sha256 is None) == (not self.unpinned):
            raise ValueError("give sha256, or unpinned (why the file cannot be pinned), not both")
        return self


#: FINISHED figures a reference may publish besides the case's own metrics.
REFERENCE_FIGURES = ("p_whole", "p_train", "p_core", "e2e_time")


class Reference(_Strict):
    """Figures published for the case on one configuration, e.g. FlagPerf's resnet50 on nvidia
    A100 1x8: ``{p_whole: 4475, e2e_time: 28661, final_acc1: 75.0}`` (units: those of the
    FINISHED figure, samples/s, s, the metric's unit)."""

    vendor: str
    hardware: str
    nnodes: Annotated[int, BeforeValidator(not_bool), Field(gt=0)]
    nproc_per_node: Annotated[int, BeforeValidator(not_bool), Field(gt=0)]
    #: The configuration's ``precision`` the figures were measured with (fp32, amp, ...);
    #: empty where none applies (a memory size, a link's bandwidth).
    precision: str = ""
    #: Positive, but for a metric declared ``direction: lower`` (a loss may be negative).
    figures: dict[str, Annotated[float, BeforeValidator(not_bool), Field(allow_inf_nan=False)]] = (
        Field(min_length=1))
    #: Where the figures were published (a file of FlagPerf, a paper, with the machine).
    source: str = Field(min_length=1)
    label: str | None = None
    note: str = ""

    _names = field_validator("vendor", "hardware")(check_name)

    _figure_keys = field_validator("figures")(_keys_of)

    @property
    def shown_label(self) -> str:
        """``label``, else ``FlagPerf's A100 1x8``."""
        return self.label or f"FlagPerf's {self.hardware} {self.nnodes}x{self.nproc_per_node}"


class SpeedIndex(_Strict):
    """A case's speed index, one JSON file per round as the Megatron reproduction seed (003)
    writes it: ``model_name`` is ``<repo>_<model>_<sp|mp>_bs<batch>_<precision>_<chips>``,
    with the batch from the config key ``batch_key`` (per chip); ``FINAL_RESULT`` is the
    FINISHED figure ``figure`` in ``unit``. ``direction_id``: 0 CV, 1 NLP, 2 Rec."""

    repo: str
    model: str
    mission_name: str = Field(min_length=1)
    direction_id: Literal[0, 1, 2]
    unit: str = "tokens/s"
    figure: str = "p_train"
    batch_key: str = "micro_batch_size"

    _names = field_validator("repo", "model")(check_name)
    _keys = field_validator("figure", "batch_key")(_key)


class CaseFile(_Strict):
    """``benchmarks/.../<model>/<framework>/case.yml``."""

    suite: Literal[tuple(SUITES)]
    kind: Literal["convergence", "llm"] = "convergence"
    description: str = Field(min_length=1)
    launcher: str
    #: A file of the case folder run as it is, or else:
    entry: str | None = None
    #: the module whose ``run(case)`` runs the case (``python -m driver.run``), and its model.
    driver: str | None = None
    model: ModelSpec | None = None
    timeout: Annotated[int, BeforeValidator(not_bool), Field(gt=0)]
    metrics: dict[str, Metric] = {}
    target: Target | None = None
    also_targets: list[Target] = []
    throughput: Throughput = Throughput()
    mfu: Mfu | None = None
    precision_peak: dict[str, str] = {}
    monitoring: Window | None = None
    requirements: list[str] = []
    env: dict[str, Any] = {}
    data: DataSpec | None = None
    checkpoint: Checkpoint | None = None
    large_artifacts: list[str] = []
    speed_index: SpeedIndex | None = None
    #: After ``metrics``: its figure keys are checked against them.
    references: list[Reference] = []

    @field_validator("launcher")
    @classmethod
    def _launcher(cls, value: str) -> str:
        from flagperf_ansible.config.launchers import LAUNCHERS
        if value not in LAUNCHERS:
            raise ValueError(f"{value!r} is not a launcher ({', '.join(LAUNCHERS)})")
        return value
    _entry = field_validator("entry")(check_path)
    _driver = field_validator("driver")(_dotted)

    _metric_keys = field_validator("metrics")(_keys_of)

    @field_validator("references")
    @classmethod
    def _references(cls, value: list[Reference], info: ValidationInfo) -> list[Reference]:
        metrics = info.data.get("metrics") or {}
        seen: set[tuple[str, str, int, int]] = set()
        for index, ref in enumerate(value):
            where = f"entry {index} ({ref.vendor} {ref.hardware} {ref.nnodes}x{ref.nproc_per_node})"
            for key, number in ref.figures.items():
                if key not in REFERENCE_FIGURES and key not in metrics:
                    raise ValueError(f"{where}: figure {key!r} is not one of "
                                     f"{', '.join((*REFERENCE_FIGURES, *metrics))}")
                if number <= 0 and (key not in metrics or metrics[key].direction != "lower"):
                    raise ValueError(f"{where}: figure {key!r} is {number:g}: only a metric "
                                     "declared direction lower may be 0 or negative")
            four = (ref.vendor, ref.hardware, ref.nnodes, ref.nproc_per_node)
            if four in seen:
                raise ValueError(f"{where}: a second entry for this vendor, hardware, nnodes "
                                 "and nproc_per_node")
            seen.add(four)
        return value

    @field_validator("requirements")
    @classmethod
    def _requirements(cls, value: list[str]) -> list[str]:
        for item in value:
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._\-\[\],<>=!~ ]*", item):
                raise ValueError(f"{item!r} is not a requirement specifier (name[extras]op version)")
        return value

    @field_validator("env", mode="before")
    @classmethod
    def _env(cls, value: Any) -> Any:
        return check_env(value)

    @model_validator(mode="after")
    def _consistent(self) -> "CaseFile":
        if (self.entry is None) == (self.driver is None):
            raise ValueError("give driver (the module that runs the case, with model) or "
                             "entry (a file of the case folder run as it is), not both")
        if self.model is not None and self.driver is None:
            raise ValueError("model is built by a driver: name the driver")
        if self.driver is not None and self.launcher == "binary":
            raise ValueError("launcher binary runs an entry file, not a driver")
        targets = [("target", self.target)] if self.target else []
        targets += [(f"also_targets[{i}]", t) for i, t in enumerate(self.also_targets)]
        for where, target in targets:
            if target.metric not in self.metrics:
                raise ValueError(f"{where}.metric {target.metric!r} is not one of metrics")
            wanted = ">=" if self.metrics[target.metric].direction == "higher" else "<="
            if target.comparison != wanted:
                raise ValueError(f"{where}.comparison {target.comparison!r} contradicts "
                                 f"the direction of {target.metric}")
        if self.also_targets and self.suite != "training":
            raise ValueError("also_targets are a training case's (further convergence targets)")
        if len({t.metric for _, t in targets}) < len(targets):
            raise ValueError("two targets on one metric")
        if self.suite in ("training", "inference") and self.target is None:
            raise ValueError(f"a {self.suite} case needs target (its metric, comparison and "
                             "config key)")
        if self.suite == "base" and not self.metrics:
            raise ValueError("a base case needs metrics (the figures it measures)")
        if self.kind == "llm" and self.suite != "training":
            raise ValueError("kind llm is a training case's (a fixed number of steps)")
        if self.checkpoint and self.data is None:
            raise ValueError("checkpoint lies under the data folder: declare data")
        return self


class StandardConfig(_Strict):
    """``config/standard.yaml``."""

    params: dict[str, Any]
    mutable: list[str] = []
    fixed: list[str] = []

    @field_validator("mutable", "fixed")
    @classmethod
    def _subsets(cls, value: list[str], info: ValidationInfo) -> list[str]:
        params = info.data.get("params") or {}
        for key in value:
            if key not in params:
                raise ValueError(f"{key!r} is not a key of params")
            if info.field_name == "fixed" and key in info.data.get("mutable", ()):
                raise ValueError(f"{key!r} is both mutable and fixed")
        return value


#: The configuration key a profile's baselines set for the driver (benchmarks/driver/
#: convergence.py reads it under the same name).
EVALUATE_BASELINES = "evaluate_baselines"


class Baselines(_Strict):
    """A profile's check that its target means learning (``driver.convergence``): its rounds
    score the untrained model and the best input-blind predictor, and the target must clear
    both by several times ``spread``, the metric's run-to-run spread at the target, in its
    unit, measured or derived as ``basis`` says. ``target``: the metric (a FINISHED key) of the
    target that must clear them, where a case has further targets (``also_targets``) and the
    profile sets one; default: the case's ``target``."""

    spread: float = Field(gt=0, allow_inf_nan=False)
    basis: str = Field(min_length=1)
    target: str | None = None


#: A topology: ``<nnodes>x<nproc_per_node>`` (``2x1``: two hosts, one process each).
TOPOLOGY_PATTERN = re.compile(r"[1-9][0-9]*x[1-9][0-9]*")


def world_size(topology: str) -> int:
    """The processes of a topology: ``2x2`` -> 4."""
    nnodes, nproc = topology.split("x")
    return int(nnodes) * int(nproc)


class Scaling(_Strict):
    """How a profile keeps its target across topologies (``<nnodes>x<nproc_per_node>``). A
    topology it does not name is refused before any host is touched, as FlagPerf fails at
    start where it has no ``config_<hardware>x<nnodes>x<nproc>.py``.

    * ``rule: global_batch``: the profile's ``batch_key`` (e.g. ``train_batch_size``) holds the
      global batch; each process takes it divided by the world size, which must divide it.
      Updates per epoch, learning rate and schedule then stay those of 1x1. ``topologies``:
      the list of topologies it holds at.
    * ``rule: per_topology``: ``topologies`` maps each topology it holds at to the params it
      changes there (empty: none), as FlagPerf's per-topology vendor configurations.

    ``why``: one line saying why the rule suits the case."""

    rule: Literal["global_batch", "per_topology"]
    topologies: list[str] | dict[str, dict[str, Any] | None] = Field(min_length=1)
    batch_key: str | None = None
    why: str = Field(min_length=1)

    @field_validator("topologies")
    @classmethod
    def _topologies(cls, value: Any) -> Any:
        for topology in value:
            if not isinstance(topology, str) or not TOPOLOGY_PATTERN.fullmatch(topology):
                raise ValueError(f"{topology!r} is not a topology <nnodes>x<nproc_per_node> "
                                 "(e.g. 2x1)")
        if isinstance(value, list) and len(set(value)) < len(value):
            raise ValueError("a topology is listed twice")
        return value

    @model_validator(mode="after")
    def _rule(self) -> "Scaling":
        if self.rule == "global_batch":
            if self.batch_key is None or not isinstance(self.topologies, list):
                raise ValueError("rule global_batch: give batch_key (the key holding the "
                                 "global batch) and topologies as a list")
            _key(self.batch_key)
        elif self.batch_key is not None or not isinstance(self.topologies, dict):
            raise ValueError("rule per_topology: give topologies as a mapping of topology to "
                             "the params it changes there, and no batch_key")
        return self

    @property
    def supported(self) -> list[str]:
        """The topologies it holds at, in the order given."""
        return list(self.topologies)


class ProfileInfo(_Strict):
    description: str = Field(min_length=1)
    #: What the profile shrinks against the standard configuration (empty: nothing).
    reduced: list[Literal[REDUCTIONS]] = []
    #: A training profile's baselines; its rounds then set the trainer's evaluate_baselines.
    baselines: Baselines | None = None
    #: The topologies its target holds at, and how it scales to them. A profile whose target
    #: means learning (with baselines) must say; without it, a profile runs at any topology.
    scaling: Scaling | None = None

    @model_validator(mode="after")
    def _measured(self) -> "ProfileInfo":
        if self.baselines is not None and self.scaling is None:
            raise ValueError("a profile with baselines (a target that means learning) declares "
                             "scaling: the topologies its target holds at and how")
        return self


class ProfileConfig(_Strict):
    """``config/<hardware>.yaml``: a case's profile for a kind of hardware."""

    profile: ProfileInfo
    params: dict[str, Any] = {}
    #: The profile's own initial checkpoint (e.g. the reduced model's), replacing the case's.
    checkpoint: Checkpoint | None = None
