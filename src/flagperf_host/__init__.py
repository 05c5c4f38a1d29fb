"""The host side: what runs on the benchmark hosts, standard library only (Python 3.8+).

Shipped as one zip archive, the way Ansible ships a module with its ``module_utils``:
``flagperf.benchmark.piped_script`` sends it with the task over the open ssh connection and runs
one of the entry modules below as ``__main__`` (as ``python -m`` would), importing the rest from
the archive in memory, so nothing is installed on the host first
(``flagperf_ansible.run.host_archive`` builds it). The controller imports the same modules.

Entry modules (each runs as ``python -m flagperf_host.<name>``):

* ``node_job``: a node's case processes in the background (the launch and container roles);
* ``monitor``: the hardware and system monitor of a round (the monitor role);
* ``sys_info``: a description of the host (the sys_info role);
* ``container_end``: a round's container, its log kept and itself removed (the container role);
* ``framework_env``: a framework's Python environment (the framework_env role);
* ``folders_check``: the folders a run writes and the data folders its cases read (preflight);
* ``data_check``: a data folder in its case's on-disk format (preflight, ``data check``).

Shared by them: ``process`` (start, wait, signal and kill a whole process tree; pid files),
``checks`` (one module per data format) and ``readers`` (one per binary format: HDF5,
TFRecord and protobuf, FLAC, fairseq's index), which case code reads with too.
"""
