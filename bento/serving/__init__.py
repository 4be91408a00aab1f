"""How BentoML runs Embento's processes: its behaviour patched where it costs or misleads (`patches`), workers
placed on cores and GPUs (`placement`), the server's start and stop (`lifecycle`, `start_failures`), the log
records (`server_logging`: never a request's content) and each process's memory report (`process_memory`)."""
