"""Collectors: turn what a deployment already has (NVML, /metrics endpoints, request traces,
model configs) into facts v1 with provenance. Each returns a Collected value; `merge` keeps, for
each fact, the reading of the best quality."""
