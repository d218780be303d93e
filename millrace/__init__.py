"""Millrace: durable, elastic stream storage in the spirit of Pravega, speaking the Kafka wire protocol.

One import namespace for everything Millrace installs. The source tree keeps its places at the top
(``gateway/``, ``store/``, ``client/``); packaging maps them to ``millrace.gateway``, ``millrace.store``
and ``millrace.client`` (see ``setup.py``), so installing Millrace never adds generic top-level names
such as ``store`` or ``client`` that would clash with a user's own modules.
"""

__version__ = "0.1.0"
