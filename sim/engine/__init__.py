"""The simulator engine: virtual clock and event queue (``loop``), request table (``requests``)."""
