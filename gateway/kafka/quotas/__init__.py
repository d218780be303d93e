"""Kafka client quotas (KIP-13, KIP-55, KIP-124, KIP-219, KIP-546): what they are set on and which one
applies (``entities``), where they are kept (``table``), and how requests are measured and throttled
against them (``enforcement``).

A package of the Kafka adapter rather than ``gateway/security``: quota entities are Kafka's (a principal
name and a request header's client id), and enforcement sits in the Kafka request path, the throttle
going back in Kafka responses' ``throttle_time_ms``; nothing here authenticates or authorizes.
"""
