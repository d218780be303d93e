"""What the listeners share and the server is assembled from: options, assembly, framing, limits, metrics."""
