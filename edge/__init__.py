"""The edge process of one region (DESIGN §1, §6; paper §3.3–3.4, Fig. 8b).

An aiohttp HTTP front (OpenAI-compatible + SGLang ``/generate``) over the pure core: every
request is tokenized, looked up in the keyless view and scored by ``EdgeDiscovery.decide`` (the
same code as the simulator), then forwarded to the winner with streaming pass-through. Responses
feed the cache belief, the queue view (piggybacked vectors) and the hot-prefix tracker.

Modules: ``config`` (EdgeConfig), ``tokenizer`` (+ ``hf_tokenizer``), ``openai_shapes`` (request
parsing, error shape, chat reshaping), ``feedback`` (reused tokens, queue-vector header),
``forwarder`` (per-worker pools, WAN delay), ``service`` (decide/feedback/explain state),
``metrics``, ``handlers`` + ``app`` (HTTP), ``loads`` (local queue polling), ``sync`` (Kafka
views, queue vectors, sinks), ``main`` (lifecycle, SIGTERM). Nothing here is imported by
``kvcompass/``.
"""
