"""``millrace logd``: a log replica process (a BookKeeper bookie's role) reached over ZeroMQ."""
