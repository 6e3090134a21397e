"""``migrate-values``: drop ``--root-shard-kubeconfig-file`` from values and manifests."""
