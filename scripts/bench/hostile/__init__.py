"""The hostile-input suite of ``scripts/bench/bench_hostile.py``: payloads, transport, server and monitors,
cases, and the report."""
