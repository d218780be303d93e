"""The HTTP listener: the JSON API, /metrics and the web console."""
