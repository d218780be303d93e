"""The native Python client: a peer of the server that shares only ``millrace.protocol`` with it.

Units: ``connection`` (pipelined connections, reconnecting pool), ``controller`` (the controller's
commands, typed), ``streams`` (configurations, descriptions, stream cuts), ``manager``
(``StreamManager``), ``segments`` (raw segment access for tools and tests).
"""
