"""Pure: Shard spec, versions and the flag table, flags, render, status and the planner."""
