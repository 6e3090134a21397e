"""The ``kcp-shard-operator`` command line, one module per sub-command."""
