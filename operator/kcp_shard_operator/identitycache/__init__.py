"""The stale ``apiexport-identity-cache`` ConfigMap: policy, kubeconfig loading, HTTP client."""
