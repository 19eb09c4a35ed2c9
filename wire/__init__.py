"""What the shells share below them: Kafka, Avro and the files they exchange.

The edge, the workers' sidecar, the Faust maintenance units, the offline tools and the end-to-end
launcher all speak to the same broker in the same formats. Their common ground lives here, once:
the Confluent-framed Avro codec and the schema registries (``codec``, ``registry``), the fixed-width
record keys, the patch wire codec and sink (``patches``), the ``index-ops`` record
(``index_ops``), topic names, partition counts and creation (``config``, ``topics``), the one
producer port and its adapters (``producer``), dead letters (``dead_letter``), the memory-mapped
view files (``view_files``), the patch applier and the one ``index-patches`` follower with its stall
watch (``patch_applier``, ``patch_follower``, ``follower_watch``), deployment files
(``deployments``) and the local KRaft broker (``kafka_local``, ``kafka_jars``).

May import the core (``kvcompass``) and nothing else of the project: no shell imports another, and
what two of them need is here. Must not hold index or routing logic (the core does).
"""
