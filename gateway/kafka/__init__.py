"""The Kafka listener: Kafka's wire protocol over Millrace streams."""
