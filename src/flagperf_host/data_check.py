"""Check that a folder holds a data set in the on-disk layout a case reads (standard library only).

Runs on the controller (``flagperf_ansible.datasets.check``, ``flagperf-ansible data check``)
and, unchanged, on a host at preflight, where only python3's standard library is sure to exist:
``flagperf.benchmark.piped_script`` sends the ``flagperf_host`` archive and runs this module as
``python3 -m flagperf_host.data_check ARGS`` would, importing nothing outside the standard library
and the archive. The checkers are ``flagperf_host.checks.<format>``, one module per format
(``CHECKERS``); the binary formats they read, ``flagperf_host.readers``.

On the command line::

    python3 -m flagperf_host.data_check FORMAT PATH
        problems one per line; exit 0 (fine), 1 (problems)
    python3 -m flagperf_host.data_check '[{"format": F, "path": P, ...}, ...]'
        one JSON document on stdout: {"results": [{"format", "path", "problems", ...}]}
        (other keys of each request, e.g. case_id, are echoed back; a request's
        "checkpoint": {"path", "sha256"} also checks that file under PATH, and its "onnx"
        that an inference case's exist_onnx_path is a file, under PATH unless absolute);
        exit 0 when no result has problems, 1 when one has, 2 on bad arguments (then
        {"error": ...}).
"""

import hashlib
import json
import os
import sys

from flagperf_host.checks import (bert_eval_text, coco2017, cpm_text, glm_record_hdf5, imagenet,
                                  imagenet_tfrecord, librispeech, ljspeech, megatron_indexed,
                                  mlperf_bert_hdf5, wmt14_en_de_fairseq, wmt14_en_de_text)

PROG = "data_check"

CHECKERS = {
    "imagenet": imagenet.check,
    "imagenet_tfrecord": imagenet_tfrecord.check,
    "coco2017": coco2017.check,
    "ljspeech": ljspeech.check,
    "librispeech": librispeech.check,
    "mlperf_bert_hdf5": mlperf_bert_hdf5.check,
    "wmt14_en_de_text": wmt14_en_de_text.check,
    "wmt14_en_de_fairseq": wmt14_en_de_fairseq.check,
    "cpm_text": cpm_text.check,
    "glm_record_hdf5": glm_record_hdf5.check,
    "bert_eval_text": bert_eval_text.check,
    "megatron_indexed": megatron_indexed.check,
}


def check(format_name, path):
    """Problems of the data set folder ``path`` in format ``format_name`` (a key of CHECKERS);
    an empty list when its layout is right.

    Raises:
        KeyError: an unknown format.
    """
    checker = CHECKERS[format_name]
    if not os.path.isdir(path):
        return ["%s: not a folder" % path]
    try:
        return checker(str(path))
    except OSError as err:  # unreadable entries, a file vanishing mid-check
        return ["%s: %s" % (err.filename or path, err.strerror or err)]


def checkpoint_problems(root, relative, sha256):
    """Problems of the initial checkpoint ``relative`` under the data folder ``root``: missing,
    or its SHA-256 is not ``sha256`` (read whole, in 1 MiB blocks; None: not pinned, the file
    need only exist)."""
    path = os.path.join(root, relative)
    if not os.path.isfile(path):
        return ["%s: no such checkpoint file" % relative]
    if sha256 is None:
        return []
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != sha256:
        return ["%s: SHA-256 %s, the case expects %s" % (relative, digest.hexdigest(), sha256)]
    return []


def _requests(argv):
    """The checks asked for on the command line: ``[{"format", "path", ...}]``."""
    if len(argv) == 2:
        return [{"format": argv[0], "path": argv[1]}], False
    if len(argv) != 1 or not argv[0].lstrip().startswith(("[", "{")):
        raise ValueError("usage: %s FORMAT PATH | JSON list of {format, path}" % PROG)
    try:
        requests = json.loads(argv[0])
    except ValueError as err:
        raise ValueError("the argument is not JSON (%s)" % err)
    if isinstance(requests, dict):
        requests = [requests]
    if not isinstance(requests, list) or not all(
            isinstance(r, dict) and isinstance(r.get("format"), str)
            and isinstance(r.get("path"), str) for r in requests):
        raise ValueError("the JSON argument must be a list of {format, path} objects")
    return requests, True


def main(argv):
    try:
        requests, as_json = _requests(argv)
        unknown = sorted(set(r["format"] for r in requests) - set(CHECKERS))
        if unknown:
            raise ValueError("unknown data format %s (known: %s)" % (
                ", ".join(unknown), ", ".join(sorted(CHECKERS))))
    except ValueError as err:
        if argv and argv[0].lstrip().startswith(("[", "{")):
            print(json.dumps({"error": str(err)}))
        else:
            sys.stderr.write("%s: %s\n" % (PROG, err))
        return 2
    results = []
    for request in requests:
        result = dict(request)
        result["problems"] = check(request["format"], request["path"])
        point = request.get("checkpoint")
        if isinstance(point, dict) and not result["problems"]:
            pinned = point.get("sha256")
            result["problems"] = checkpoint_problems(request["path"], str(point.get("path")),
                                                     None if pinned is None else str(pinned))
        onnx = request.get("onnx")
        if isinstance(onnx, str) and not result["problems"] and not os.path.isfile(
                os.path.join(request["path"], onnx)):
            result["problems"] = ["%s: no such ONNX file (exist_onnx_path: the round loads it "
                                  "instead of exporting one)" % onnx]
        results.append(result)
    if as_json:
        print(json.dumps({"results": results}))
    else:
        for problem in results[0]["problems"]:
            print(problem)
    return 1 if any(r["problems"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
