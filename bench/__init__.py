"""Benchmarks that print figures (STYLE.md 12); run each as a script, ``python bench/<name>.py``.

A package only so that type checkers name the scripts ``bench.pipeline``, ``bench.edge``, ...
instead of shadowing the ``pipeline`` and ``edge`` packages.
"""
