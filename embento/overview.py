"""The `embento` command's subcommands and what each does: read by the entry point (`embento.cli`), which prints
them where the bundle cannot run, and by the bundle's `commands`, whose parser has them. It imports nothing."""

from __future__ import annotations

DESCRIPTION = "Serve embedding models behind OpenAI-style routes."
COMMANDS = {
    "serve": "validate the configuration and start the server",
    "build": "build the Bento variants: embento:<version>-<accel>",
    "containerize": "build the container image of each Bento variant",
    "models": "manage checkpoints in BentoML's model store",
    "keys": "manage the tenants' API keys (auth.keys_file)",
}
