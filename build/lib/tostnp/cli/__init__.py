"""Subcommands of the CLI (train, evaluate, sample, figures)."""
