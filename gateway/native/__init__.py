"""The native segment protocol: what Kafka has no words for, spoken by the native Python client."""
