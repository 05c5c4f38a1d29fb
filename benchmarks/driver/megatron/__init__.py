"""LLM pretraining through megatron-core: the driver of the ``megatron`` framework's cases."""
