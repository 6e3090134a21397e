"""Plumbing shared by the tests (tests/) and the benchmarks (bench/): the pinned tools, helm,
processes, the local cluster, waiting, API request counters. Not part of the wheel."""
