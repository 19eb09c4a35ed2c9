"""Subcommands of the `kvcompass` CLI; each module registers one command and imports its shell lazily."""
