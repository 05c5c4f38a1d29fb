"""Rounds of an LLM case (Megatron's GPT, tokens/s) as finalize_round writes them, from rank
logs with the FINISHED keys the Megatron driver writes, for the speed index and the scaling
view; no training."""

from __future__ import annotations

import io
import json
from pathlib import Path

from driver import perflog
from flagperf_ansible.results.layout import write_run
from flagperf_ansible.results.rounds import finalize_round

SPEED_INDEX = {"repo": "nlp", "model": "gpt", "mission_name": "语义表示", "direction_id": 1,
               "unit": "tokens/s", "figure": "p_train", "batch_key": "micro_batch_size"}
#: The gpt case's contract as CaseDef.contract() gives it, with its speed index.
GPT = {"suite": "training", "metrics": {"final_loss": {"direction": "lower", "unit": "",
                                                       "description": "LM loss"}},
       "target": None, "also_targets": [],
       "throughput": {"figure": "p_train", "unit": "tokens", "count": "num_trained_tokens"},
       "window": ["TRAIN_START", "TRAIN_END"], "data_format": None, "references": [],
       "speed_index": SPEED_INDEX}
HOSTS = [{"host": "gpu-node-a", "address": "10.20.30.40", "label": "host0"}]


def finished(chips: int, p_train: float) -> dict:
    return {"p_whole": p_train * 0.9, "p_train": p_train, "p_core": p_train * 1.1,
            "tokens_per_chip_per_second": p_train / chips, "num_trained_tokens": 819200,
            "num_trained_samples": 800, "train_iters": 200, "steps_run": 200,
            "warmup_steps": 10, "world_size": chips, "final_loss": 6.2,
            "peak_memory_gib": 7.5, "converged": True}


def spec_of(case_id: str) -> dict:
    """The case spec of a gpt case id, ``gpt-megatron-A100x1x8``."""
    hardware, nnodes, nproc = case_id.split("-")[-1].rsplit("x", 2)
    return {"model": "gpt", "framework": "megatron", "hardware": hardware,
            "nnodes": int(nnodes), "nproc_per_node": int(nproc), "repeat": 1}


def llm_run(run_dir: Path, rounds: list[tuple[str, int, float | None, int, dict]],
            created: str | None = None) -> Path:
    """A run of gpt rounds ``(case_id, chips, p_train or None: no FINISHED, rc, config)``,
    each one round on host gpu-node-a, whose rank 0 log names its addresses; run.json's
    ``created`` (``%Y-%m-%dT%H:%M:%S%z``) as given."""
    cases = sorted({c for c, *_ in rounds})
    plan_rounds = [{"key": f"{c}/round{n}", "case_id": c, "round": n, "suite": "training",
                    "contract": GPT, "profile": None}
                   for c in cases for n in range(1, 1 + sum(r[0] == c for r in rounds))]
    write_run(run_dir, {"vendor": "nvidia", "runtime": "none", "hosts": HOSTS,
                        "cases": [{"case_id": c, "suite": "training", "contract": GPT,
                                   "spec": spec_of(c), "profile": None} for c in cases],
                        "rounds": plan_rounds}, {})
    seen: dict[str, int] = {}
    for case, chips, p_train, rc, config in rounds:
        number = seen[case] = seen.get(case, 0) + 1
        node = run_dir / case / f"round{number}" / "gpu-node-a_noderank0"
        node.mkdir(parents=True)
        lines = ["> initializing torch distributed: MASTER_ADDR=10.20.30.40 MASTER_PORT=29500",
                 "[gpu-node-a] NCCL INFO NET/Socket : Using [0]eth0:192.168.1.7<0> "
                 "[1]ib0:fe80::a00:27ff:fe4e:66a1%ib0<0>",
                 " iteration      200/     200 | elapsed time per iteration (ms): 431.2 | "
                 "lm loss: 6.200000E+00 |"]
        stream = io.StringIO()
        log = perflog.PerfLogger(rank=0, stream=stream)
        stream.write("\n".join(lines[:2]) + "\n")
        log.log(perflog.TRAIN_START)
        stream.write(lines[2] + "\n")
        log.log(perflog.TRAIN_END)
        if p_train is not None:
            log.log(perflog.FINISHED, finished(chips, p_train))
        (node / "rank0.out.log").write_text(stream.getvalue())
        finalize_round({"run_dir": str(run_dir), "key": f"{case}/round{number}",
                        "hosts": [{"host": "gpu-node-a", "noderank": 0, "rc": rc,
                                   "timed_out": False}],
                        "config": config, "overrides": {}, "started_ms": 1000,
                        "ended_ms": 2000})
    if created:
        document = json.loads((run_dir / "run.json").read_text())
        document["created"] = created
        (run_dir / "run.json").write_text(json.dumps(document))
    return run_dir


SP = {"micro_batch_size": 8, "global_batch_size": 8, "precision": "fp32", "seq_length": 1024,
      "tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1}
MP = {**SP, "micro_batch_size": 16, "global_batch_size": 128, "precision": "fp16"}


