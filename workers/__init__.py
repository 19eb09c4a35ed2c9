"""The sidecar beside each SGLang (or vLLM) worker, and an emulated SGLang worker (architecture §8).

Shell package: sockets, HTTP and Kafka live here. Modules: ``protocol`` (engine KV-event wire
format), ``block_table`` (engine blocks -> our keys and tiers), ``bridge`` (ZMQ -> kv-events),
``load_reporter`` (/v1/loads -> queue-vectors), ``migration`` (migrations -> prefill-only
requests), ``sglang_launch`` (real SGLang command line), ``config`` (``SidecarConfig``),
``emulated/`` (a GPU-less stand-in speaking SGLang's protocols).
"""
