"""The only door to the Kubernetes API: credentials and the client, on the `kubernetes` library."""
