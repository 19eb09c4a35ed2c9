"""KVCompass core: the pure discovery-plane logic shared by the simulator, pipeline and edge.

This package owns prefix keys, latency-derived levels, the Ludo index (maintenance tables with keys,
keyless views, patches), the joint score and its estimators. It performs no I/O and reads no
clock: time enters as ``now_ms`` arguments and randomness as ``numpy.random.Generator`` objects.
Only the standard library's pure modules, numpy, numba and mmh3 may be imported here
(``kvcompass/cli`` and ``kvcompass/__main__.py`` excepted; a test enforces it).
"""

__version__ = "0.1.0"
