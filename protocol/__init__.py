"""What the server and the native client share, and nothing else: the native wire codec (``wire``), the
error types both sides raise (``errors``), the value types they exchange (``contracts``), segment names
(``names``), the routing-key hash (``keys``), the key-value table layout (``tables``), events as Kafka
record batches (``events``), a state synchronizer's entries (``synchronizer``) and a reader group's state
with its pure updates (``reader_group_state``: the client decides with them, the server folds them to
show groups). Pure: no I/O and no server imports, so the client can depend on it without
pulling in the store or Twisted."""
