"""An emulated SGLang worker: same HTTP API and KV-event stream, a real two-tier prefix cache,
service times from a cost model. A stand-in for the GPU, not for the discovery plane."""
