"""Launchers: how one node of a round starts its case, one class per ``launcher:`` of case.yml.

Every launcher turns a round of the run plan (``flagperf_ansible.run.plan.build_plan``: ``launcher``,
``case_dir``, ``entry``, ``nnodes``, ``nproc_per_node``, ``nodes``, ``master_addr``, ``env``,
``vendor_dir``) and a node's noderank into an argv (a list: no shell is involved, each value is
one element) and the launcher's part of the environment. ``launch_argv`` and ``launch_env`` put
the parts every launcher shares around them: what runs (``case_script``: the driver's one entry
``-m driver.run --case <case folder>`` for a case whose case.yml names a ``driver``, else the
case's ``entry`` file), the case's own arguments ``--config <out>/config.yaml --output_dir
<out> --data_dir <data>``, ``PYTHONUNBUFFERED``, ``PYTHONPATH`` (``case_path``:
``<root>/benchmarks``, so that the driver package and every case folder import as packages and
no case edits ``sys.path``; ``<root>/src``, where deploy ships the host package
``flagperf_host`` whose binary readers case code uses; the vendor adapter's folder), the case's
``env``, ``FLAGPERF_VENDOR_DIR`` (where the trainer's vendor adapter hooks look:
``benchmarks/driver/torch/vendor_hooks.py``) and the user's ``flagperf_env`` last.

``LAUNCHERS`` maps each name to its launcher; case.yml's ``launcher:`` must be one of its keys.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, ClassVar


@dataclass(frozen=True)
class Node:
    """One node of a round: the round (a plan round), this node's ``noderank`` (0 hosts the
    rendezvous) and the ``master_port`` the round's rendezvous listens on."""

    round: Mapping[str, Any]
    noderank: int
    master_port: int

    @property
    def nnodes(self) -> int:
        return int(self.round["nnodes"])

    @property
    def nproc_per_node(self) -> int:
        return int(self.round["nproc_per_node"])

    @property
    def master_addr(self) -> str:
        return str(self.round["master_addr"])

    def rank_env(self) -> dict[str, str]:
        """torchrun's variables for a launcher that starts one process per node: the node is
        the rank (``RANK`` = noderank, ``WORLD_SIZE`` = nnodes, ``LOCAL_RANK`` 0)."""
        return {"RANK": str(self.noderank), "LOCAL_RANK": "0", "WORLD_SIZE": str(self.nnodes),
                "MASTER_ADDR": self.master_addr, "MASTER_PORT": str(self.master_port)}


#: The one entry of every case that names a driver: ``python -m driver.run``
#: (benchmarks/driver/run.py).
DRIVER_ENTRY = ["-m", "driver.run"]


class Launcher:
    """How a node starts its case. ``script`` is what a Python interpreter runs, ``[<entry
    path>, *case arguments]`` or ``["-m", "driver.run", *case arguments]`` (``case_script``);
    ``python`` the interpreter (the vendor image's for runtime docker, ``flagperf_python``
    for runtime none); ``output_dir`` the node's output folder, where a launcher keeps its
    own logs."""

    name: ClassVar[str]
    #: Whether it starts ``nproc_per_node`` processes on a node (else one process per node).
    per_node_processes: ClassVar[bool] = False

    def argv(self, node: Node, python: str, script: list[str], output_dir: str) -> list[str]:
        raise NotImplementedError

    def env(self, node: Node) -> dict[str, str]:
        """The launcher's own variables (ranks, cluster description); none by default."""
        return {}


class Torchrun(Launcher):
    """``python -m torch.distributed.run --nproc_per_node P``, then ``--standalone`` on one
    node, else a static rendezvous on noderank 0: ``--nnodes N --node_rank R --master_addr A
    --master_port M``. torchrun sets each worker's ranks itself."""

    name = "torchrun"
    per_node_processes = True

    def argv(self, node, python, script, output_dir):
        argv = [python, "-m", "torch.distributed.run", "--nproc_per_node", str(node.nproc_per_node)]
        if node.nnodes == 1:
            argv.append("--standalone")
        else:
            argv += ["--nnodes", str(node.nnodes), "--node_rank", str(node.noderank),
                     "--master_addr", node.master_addr, "--master_port", str(node.master_port)]
        return argv + script


class Python(Launcher):
    """The entry under the interpreter, one process per node (e.g. diagnostic cases); its
    ranks come from ``Node.rank_env``."""

    name = "python"

    def argv(self, node, python, script, output_dir):
        return [python, *script]

    def env(self, node):
        return node.rank_env()


class Binary(Launcher):
    """The entry is the executable itself (a compiled micro-benchmark, a script with its own
    ``#!``), one process per node, ranks as for ``python``. It must have its exec bit (deploy
    keeps file modes); a case run by a driver has none (case_schema refuses the pair)."""

    name = "binary"

    def argv(self, node, python, script, output_dir):
        if script[0] == "-m":
            raise ValueError("launcher binary runs an entry file, not a driver module")
        return list(script)

    def env(self, node):
        return node.rank_env()


class Paddle(Launcher):
    """``python -m paddle.distributed.launch --nproc_per_node P --log_dir <out>/paddle_log``,
    and on more than one node ``--nnodes N --master A:M --rank R --host H`` (noderank 0 serves
    the rendezvous; a fixed rank keeps noderank order; ``H`` is the node's own address in the
    round: the launcher otherwise takes the address its host name resolves to, and serves the
    rendezvous only where that equals ``A``). Options as documented for
    ``paddle.distributed.launch`` (PaddlePaddle API reference, 2.3 onwards)."""

    name = "paddle"
    per_node_processes = True

    def argv(self, node, python, script, output_dir):
        argv = [python, "-m", "paddle.distributed.launch", "--nproc_per_node",
                str(node.nproc_per_node), "--log_dir", f"{output_dir}/paddle_log"]
        if node.nnodes > 1:
            argv += ["--nnodes", str(node.nnodes), "--master",
                     f"{node.master_addr}:{node.master_port}", "--rank", str(node.noderank),
                     "--host", str(node.round["nodes"][node.noderank])]
        # The launcher runs a training script ending in .py under its own interpreter and
        # anything else as a command (paddle 3.3 launch/controllers/controller.py
        # _get_entrypoint): a module entry is the interpreter's command.
        return argv + ([python] if script[0] == "-m" else []) + script


class TfConfig(Launcher):
    """TensorFlow's multi-worker setup (``MultiWorkerMirroredStrategy``): the entry under the
    interpreter, one worker process per node using all of its devices, told the cluster by
    ``TF_CONFIG`` = ``{"cluster": {"worker": worker_endpoints(...)}, "task": {"type": "worker",
    "index": noderank}}`` (TensorFlow's distributed-training guide); ``RANK``/``WORLD_SIZE``
    as for ``python`` so that the driver names rank logs alike."""

    name = "tf_config"

    def argv(self, node, python, script, output_dir):
        return [python, *script]

    def env(self, node):
        tf_config = {"cluster": {"worker": worker_endpoints(node.round["nodes"], node.master_port)},
                     "task": {"type": "worker", "index": node.noderank}}
        return {**node.rank_env(), "TF_CONFIG": json.dumps(tf_config, separators=(",", ":"))}


class Msrun(Launcher):
    """MindSpore's ``msrun`` (run as ``python -m mindspore.parallel.cluster.run``, the module
    behind the console script, so that the interpreter given runs it): ``--worker_num N*P
    --local_worker_num P --master_addr A --master_port M --node_rank R --log_dir
    <out>/msrun_log --join True`` (wait for the workers and exit with their status). Options as
    documented in MindSpore's "msrun Launching" tutorial (2.3 onwards).

    msrun starts each worker as ``python <script>``, or ``python3 <script>`` when the script
    given is ``python3``, the name looked up on PATH (mindspore 2.10,
    ``parallel/cluster/process_entity/_utils.py``): the workers' interpreter is the one PATH
    finds under the name of ``python``, as in a vendor image where it is the image's own."""

    name = "msrun"
    per_node_processes = True

    def argv(self, node, python, script, output_dir):
        worker = "python" if PurePosixPath(python).name == "python" else "python3"
        return [python, "-m", "mindspore.parallel.cluster.run",
                "--worker_num", str(node.nnodes * node.nproc_per_node),
                "--local_worker_num", str(node.nproc_per_node),
                "--master_addr", node.master_addr, "--master_port", str(node.master_port),
                "--node_rank", str(node.noderank), "--log_dir", f"{output_dir}/msrun_log",
                "--join", "True", worker, *script]


#: Every launcher by its case.yml name.
LAUNCHERS: dict[str, Launcher] = {cls.name: cls() for cls in (Torchrun, Python, Paddle, TfConfig,
                                                              Msrun, Binary)}


def get_launcher(name: str) -> Launcher:
    """The launcher called ``name``.

    Raises:
        ValueError: no launcher has that name (the message lists the known ones).
    """
    try:
        return LAUNCHERS[name]
    except KeyError:
        raise ValueError(f"unknown launcher {name!r}: known are {', '.join(LAUNCHERS)}") from None


def worker_endpoints(nodes: list[str], port: int) -> list[str]:
    """``addr:port`` of every node in noderank order, noderank ``i`` on ``port + i``.
    TensorFlow's gRPC server listens on every address of its host (``0.0.0.0:port``), so
    nodes that share a machine (loopback test hosts, containers on the host network) must
    differ in port even where their addresses differ."""
    return [f"{addr}:{port + index}" for index, addr in enumerate(map(str, nodes))]


def case_path(round_: Mapping[str, Any], root: str) -> list[str]:
    """The folders a case's processes import from, in order: ``<root>/benchmarks`` (the driver
    package, the case folders as packages), ``<root>/src`` (``flagperf_host``) and the vendor's
    ``<model>-<framework>/extern`` (modules beside its adapter:
    ``benchmarks/driver/torch/vendor_hooks.py``)."""
    path = [f"{root}/benchmarks", f"{root}/src"]
    if round_.get("model") and round_.get("framework"):
        path.append(f"{root}/{round_['vendor_dir']}/{round_['model']}-{round_['framework']}"
                    "/extern")
    return path


def case_script(round_: Mapping[str, Any], root: str) -> list[str]:
    """What the interpreter runs for the round's case: ``-m driver.run --case
    <root>/<case_dir>`` where the round has no ``entry`` (its case.yml names a driver), else
    ``<root>/<entry>``."""
    if round_.get("entry"):
        return [f"{root}/{round_['entry']}"]
    return [*DRIVER_ENTRY, "--case", f"{root}/{round_['case_dir']}"]


def launch_argv(round_: Mapping[str, Any], noderank: int, python: str, root: str,
                output_dir: str, data_dir: str, master_port: int) -> list[str]:
    """The argv that starts one node of a round: its launcher's command around
    ``case_script(round_, root)`` and ``--config <output_dir>/config.yaml --output_dir
    <output_dir> --data_dir <data_dir>``. ``root``: where the checkout (``benchmarks/``,
    ``vendors/``) is as the process sees it; ``python``: the interpreter (unused by ``binary``).

    Raises:
        ValueError: the round's launcher is unknown, or it is ``binary`` and the case has no
            entry file.
    """
    launcher = get_launcher(str(round_["launcher"]))
    script = [*case_script(round_, root), "--config", f"{output_dir}/config.yaml",
              "--output_dir", output_dir, "--data_dir", data_dir]
    return launcher.argv(Node(round_, int(noderank), int(master_port)), python, script, output_dir)


def launch_env(round_: Mapping[str, Any], noderank: int, root: str, master_port: int,
               extra: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Environment of one node's processes, every value a str, in this order (a later one
    wins): ``PYTHONUNBUFFERED=1``, the case's ``env`` (case.yml), the launcher's own
    (``Launcher.env``: ranks, ``TF_CONFIG``; a case may not rewire them),
    ``PYTHONPATH`` (:func:`case_path`, before a ``PYTHONPATH`` the case's env gives),
    ``FLAGPERF_VENDOR_DIR=<root>/<vendor_dir>``, then ``extra`` (``flagperf_env`` and the
    vendor's container env: the user may override anything).

    Raises:
        ValueError: the round's launcher is unknown.
    """
    launcher = get_launcher(str(round_["launcher"]))
    env = {"PYTHONUNBUFFERED": "1"}
    env.update({str(k): str(v) for k, v in (round_.get("env") or {}).items()})
    env.update(launcher.env(Node(round_, int(noderank), int(master_port))))
    env["PYTHONPATH"] = ":".join(filter(None, (*case_path(round_, root), env.get("PYTHONPATH"))))
    env["FLAGPERF_VENDOR_DIR"] = f"{root}/{round_['vendor_dir']}"
    env.update({str(k): str(v) for k, v in (extra or {}).items()})
    return env
