"""Signing what the core decided to issue."""
