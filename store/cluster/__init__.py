"""Cluster coordination on ZooKeeper: membership, container ownership and replicated-log metadata.

Millrace builds on an existing consensus service (ZooKeeper, through kazoo), the way Pravega and
BookKeeper do, never on a consensus protocol of its own. ``layout`` names the znodes, ``assignment``
is the pure container -> node policy, ``member`` the per-node loop (registration, election, assigning,
starting and stopping containers), ``log_metadata`` the ZooKeeper ``LogMetadataStore``.
"""
