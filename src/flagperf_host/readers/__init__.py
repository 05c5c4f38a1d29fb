"""Readers of the binary formats the data checks and the cases read, standard library only:
``hdf5`` (a file's root datasets, from its index), ``protobuf`` (a message's fields),
``tfrecord`` (a TFRecord file's first record, ``tf.train.Example`` features), ``flac`` (a FLAC
file's STREAMINFO), ``fairseq_index`` (a fairseq binarized pair's index) and ``megatron_index``
(a Megatron indexed data set's index). Each reads headers and indexes, never a whole large
file.
"""
