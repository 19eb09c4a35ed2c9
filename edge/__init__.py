"""The edge process of one region (architecture §1, §6; paper §3.3–3.4, Fig. 8b).

An aiohttp HTTP front (OpenAI-compatible + SGLang ``/generate``) over the pure core: every
request is tokenized and handed to the region's ``kvcompass.decider.Decider`` (the object the
simulator drives too: lookup, pending-holder overlay, joint score, booking, forward ledger),
then forwarded with streaming pass-through — to a local worker it books, or relayed with a
shortlist to the edge that owns the winner's region. The first byte of each response retires
the booked work and confirms the prefix; the counts feed the cache belief.

Modules: ``config`` (EdgeConfig), ``tokenizer`` (+ ``hf_tokenizer``), ``openai_shapes`` (request
parsing, error shape, chat reshaping), ``feedback`` (reused tokens, queue-vector header),
``relay`` (shortlist and refusal headers), ``forwarder`` (per-worker pools, WAN delay),
``service`` (the decider's wiring, explain state), ``records`` (Kafka records),
``client_watch`` (forwards whose client left),
``metrics``, ``handlers`` + ``app`` (HTTP), ``loads`` (local queue polling), ``sync`` (Kafka
views, queue vectors, sinks), ``main`` (lifecycle, SIGTERM). Nothing here is imported by
``kvcompass/``.
"""
