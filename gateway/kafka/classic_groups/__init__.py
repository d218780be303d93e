"""Kafka's classic group protocol: the group model (``group``) and its membership state machine (``membership``)."""
