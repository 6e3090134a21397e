"""What the operator does inside kcp for a user's Kubeconfig (the thin shell of
:mod:`kcp_shard_operator.core.kubeconfig.access`): the workspace check and the
ClusterRoleBindings, through the target with its admin kubeconfig."""
