"""Run and upgrade sharded kcp on Kubernetes.

Layers, each importing only from the ones below it (``lint-imports`` checks this):

- ``cli``: the ``kcp-shard-operator`` commands;
- ``controller``: the kopf operator (wiring, reconcile passes, the watch-fed store);
- ``identitycache`` and ``migrate``: the ConfigMap cleanup and the values migration;
- ``kube``: the only door to the Kubernetes API;
- ``core``: pure functions from a Shard spec or a version to manifests, flags and status;
- ``constants``: names shared by all of them.
"""
