"""replaybuf benchmarks: ``python -m benchmarks`` prints one table of medians and ratios."""
