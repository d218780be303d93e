"""One module per Kafka API (or per tight family of APIs), each registering with ``registry.api``."""
