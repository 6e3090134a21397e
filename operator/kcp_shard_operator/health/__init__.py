"""The operator's questions to kcp about a shard's health and data (HTTP, thin)."""
