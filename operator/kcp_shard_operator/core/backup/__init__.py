"""Backups of a shard's etcd (pure): the spec's backup block, the cron schedule, retention,
the commands a snapshot runs and what their answers mean, and the status that records it."""
