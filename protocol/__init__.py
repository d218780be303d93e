"""What the server and the native client share, and nothing else: the native wire codec, the error
types both sides raise, and the small value types they exchange. Pure: no I/O, no server imports, so
the client can depend on it without pulling in the store or Twisted."""
