"""wire.producer: the in-memory and null adapters of the one producer port keep their word."""

from __future__ import annotations

from confluent_kafka import Producer

from wire.producer import MemoryProducer, NullProducer, Produced, ProducerPort


def test_memory_producer__keeps_every_record_in_order_tombstones_included() -> None:
    p = MemoryProducer()
    p.produce("a", b"1", b"k1")
    p.produce("b", None, b"k2", 3)
    p.produce("a", b"2", b"k3")
    assert p.records[1] == Produced("b", None, b"k2", 3)
    assert p.of("a") == [(b"k1", b"1"), (b"k3", b"2")]
    assert p.flush(0) == 0


def test_null_producer__counts_what_it_drops() -> None:
    p = NullProducer()
    for i in range(3):
        p.produce("t", bytes([i]), b"k")
    assert p.dropped == 3 and p.flush(0) == 0


def test_confluent_producer__is_a_producer_port_as_it_is() -> None:
    # mypy checks the assignment; at run time, the methods the port names exist on the real class
    port: type[ProducerPort] = Producer
    assert all(callable(getattr(port, m)) for m in ("produce", "poll", "flush"))
