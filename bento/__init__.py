"""BentoML's side of Embento: `packaging/` makes and reads Bentos and images; `serving/` is how BentoML runs the
server's processes. Beside runners/, below service.py; never imports gateway/ or runners/."""
