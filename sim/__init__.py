"""Event-driven simulator of KVCompass and its baselines (architecture §9, paper §4, §5.3).

Folders follow the simulator's nouns: ``engine/`` (virtual clock, events), ``cluster/`` (simulated
GPU workers and their two-tier KV caches), ``schemes/`` (one forwarding scheme per file plus a
registry), ``workloads/`` (request generators and trace readers). ``cost.py`` holds every
hardware number, ``network.py`` the WAN, ``metrics.py`` what a run reports.
"""
