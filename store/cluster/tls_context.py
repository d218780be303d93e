"""A blocking client's TLS context from PEM files, as the cluster's links dial with it (the peer listener,
ZooKeeper): TLS 1.2 at least, the server's certificate checked against the trust store's CAs only."""

from __future__ import annotations

import ssl


def pem_client_context(truststore: str, keystore: str | None, *, check_hostname: bool, error: type[ValueError],
                       truststore_flag: str, keystore_flag: str) -> ssl.SSLContext:
    """The context; ``error`` (naming the flag, never a key) when a file does not load. ``keystore``: this
    process's certificate chain and key, presented when the server asks (None: none)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = check_hostname
    context.verify_mode = ssl.CERT_REQUIRED
    try:
        context.load_verify_locations(cafile=truststore)
    except (OSError, ssl.SSLError) as e:
        raise error(f"{truststore_flag} {truststore}: no CA certificate loads ({e})") from None
    if keystore:
        try:
            context.load_cert_chain(keystore)
        except (OSError, ssl.SSLError) as e:
            raise error(f"{keystore_flag} {keystore}: no certificate chain and matching private key load "
                        f"({type(e).__name__})") from None
    return context
