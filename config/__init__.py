"""The configuration: what `embento.yaml` and the EMBENTO_* variables say (`settings`, no BentoML), the
configuration as served, with store models resolved (`served`), and the files one server's processes share
(`server_files`)."""
