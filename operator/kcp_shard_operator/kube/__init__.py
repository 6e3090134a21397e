"""The only door to the Kubernetes API: credentials and a small HTTP client."""
