"""Subcommands of the `kvcompass` CLI.

Each module registers one command and imports its shell lazily.
"""
