"""The data checks, one module per on-disk data format (named as the format), each with
``check(root)``: the problems of the data set folder ``root``; ``flagperf_host.data_check``
maps the format names to them.

A checker is cheap: it reads names, counts and headers (a few bytes of a sample of files, the
index of an HDF5 file, the first MiB of a JSON file), never a whole large data set. It returns
a list of problems, one line each, naming the file or folder relative to the data set's root;
an empty list means the layout is right.
"""
