"""How checkpoints are found, loaded and run. Plain Python: no BentoML here."""
