"""The servers a benchmark runs against or compares with: detect-serve started locally on one model, a bare
server around the service's backend, and that backend's raw throughput without HTTP. Imports no torch."""
