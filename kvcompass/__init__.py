"""KVCompass core: the pure discovery-plane logic shared by the simulator, pipeline and edge.

This package owns prefix keys, latency-derived levels, the Ludo index (maintenance tables with
keys, keyless views, patches), rechunk and maintenance of the index, the joint score and its
estimators, and the definitions the shells share (metrics, the toy tokenizer, rings). It reads no
clock and performs no I/O beyond reading its own read-only package data (the built-in deployment
files, through ``importlib.resources``): time enters as ``now_ms`` arguments, randomness as
``numpy.random.Generator`` objects, files and sockets stay in the shells (``wire``, ``pipeline``,
``edge``, ``workers``, ``sim``, ``e2e``, ``cli``). Only the standard library's pure modules, numpy,
numba and mmh3 may be imported here (``tests/unit/kvcompass/test_core_purity.py``).
"""

__version__ = "0.1.0"
