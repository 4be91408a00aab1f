"""Helpers that the test suite (tests/) and the benchmarks (bench/) share: tiny random-weight checkpoints saved as
real folders (`checkpoints`), generated sentences (`sentences`), images and audio made here (`media`), a real
`redis-server` on loopback (`redis_server`) and Debian packages installed on demand (`apt`). Plain modules: none
imports pytest, tests/ or bench/, so a benchmark runs without the test suite. Like tests/ and bench/, this package
is not part of the bundle: bentofile.yaml's `include` does not name it, so no Bento ships it, and no module of the
bundle imports it (tests/architecture/test_layers.py)."""
