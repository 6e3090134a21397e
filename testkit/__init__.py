"""Plumbing shared by the tests (tests/) and the benchmarks (bench/): the pinned tools, helm,
processes, the local cluster, waiting. Not part of the wheel."""
