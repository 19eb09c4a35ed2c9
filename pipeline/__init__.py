"""The Kafka shell of KVCompass: topics and admin, Avro codecs, schema registry adapters, the local
broker launcher, and (later) the Faust agents that feed the core's index maintenance.

Owns every contact with Kafka and Avro. Must not hold index logic: agents decode, call the pure
core in ``kvcompass/``, and send what the core returns.
"""
