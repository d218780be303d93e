"""Kafka listener security without I/O: the broker's security configuration (``properties``), JAAS lines
(``jaas``), principals and TLS principal mapping (``principal``) and server-side SASL exchanges (``sasl``).
The connections drive these; nothing here opens a socket or touches the reactor."""
