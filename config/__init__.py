"""The configuration, the bottom layer: what `embento.yaml` and the EMBENTO_* variables say (`settings`, the server's;
`model_settings`, one served model's; no BentoML), the configuration as served, with store models resolved
(`served`), the keys file (`keys_file`), and what every layer shares: the one error hierarchy (`errors`) and the
kind names (`kind_names`). The state a running server shares is server_state/'s, not configuration."""
