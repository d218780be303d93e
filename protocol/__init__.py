"""What the server and the native client share, and nothing else: the native wire codec (``wire``), the
error types both sides raise (``errors``), the value types they exchange (``contracts``), segment names
(``names``), the routing-key hash (``keys``), the key-value table layout (``tables``) and events as Kafka
record batches (``events``). Pure: no I/O and no server imports, so the client can depend on it without
pulling in the store or Twisted."""
