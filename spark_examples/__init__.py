"""Spark pipelines on Millrace through Spark's built-in Kafka source and sink (``format("kafka")``).

- ``readings`` / ``generate``: IoT-style sensor readings (device keys, event timestamps, some late and out of
  order) produced into a topic, with a progress bar.
- ``logic``: the parse / event-time window / aggregate logic, a function over any DataFrame with a ``value``
  column (Kafka, files, memory), so it is tested without the connector.
- ``streaming_pipeline``: ``readStream.format("kafka")`` -> windowed aggregates with a watermark -> a Millrace
  topic (Kafka sink) and Parquet, each with a checkpoint so a restarted query resumes where it stopped.
- ``historical_pipeline``: the same logic as a batch query over the topic's history (offsets or timestamps).

Run them with ``spark_examples/run.sh generate|stream|history ...`` (docs/spark.md).
"""
