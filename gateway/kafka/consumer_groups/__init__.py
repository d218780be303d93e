"""The consumer group protocol (KIP-848): assignors, reconciliation, groups and their coordinator."""
