"""The stream layer: partitioned event streams over the segment store, one for both wire protocols.

A topic (Kafka) or partitioned stream (native) is a record of ``topics.TopicRegistry``; its partitions
are logs of RecordBatch v2 batches (``millrace.protocol.records``, the stored event format) appended to
stream segments by ``partitions.SegmentPartitionStorage``, with idempotent producers, transactions,
writer event numbers, compaction and retention. ``producer_ids`` hands out the producer ids both
protocols' writers append under. The Kafka and native listeners (``millrace.gateway.kafka``,
``millrace.gateway.native``) are adapters over this layer: it knows neither of them, and says why it
refuses or fails something in its own terms (``errors.Reason``), which each adapter maps to its wire's
codes in one table.
``futures`` is the thread model: partition state belongs to the reactor thread.
"""
