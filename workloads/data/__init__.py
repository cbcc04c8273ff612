"""Data files shipped with the workloads package (length_summary.json)."""
