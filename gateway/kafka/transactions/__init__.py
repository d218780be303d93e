"""Kafka transactions: the coordinator (``coordinator``) and its durable per-transactional-id state
(``state``). The partition side (open transactions, last stable offset, aborted index, markers) is in
``streams.partitions``."""

from millrace.gateway.kafka.transactions.coordinator import TransactionCoordinator
from millrace.gateway.kafka.transactions.state import TRANSACTIONS_TABLE, TransactionMetadata, TxnState

__all__ = ["TRANSACTIONS_TABLE", "TransactionCoordinator", "TransactionMetadata", "TxnState"]
