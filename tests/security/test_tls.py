"""TLS contexts from PEM settings: key material checked at start, a renewed key store used for new
connections without a restart (and a broken renewal ignored), client-certificate principals."""

from __future__ import annotations

from pathlib import Path

import pytest
from OpenSSL import SSL, crypto

from millrace.gateway.security import tls
from millrace.gateway.security.principal import ANONYMOUS, KafkaPrincipal, SslPrincipalMapper
from millrace.gateway.security.properties import Secret, SslSettings
from millrace.gateway.security.tls import ServerTls, TlsConfigError, build_context, certificate_principal

trustme = pytest.importorskip("trustme")


def served_serial(context: SSL.Context) -> int:
    certificate = SSL.Connection(context, None).get_certificate()
    assert certificate is not None
    return certificate.get_serial_number()


def write_keystore(path: Path, ca: object, name: str = "127.0.0.1") -> int:
    issued = ca.issue_cert(name)  # type: ignore[attr-defined]
    issued.private_key_and_cert_chain_pem.write_to_path(str(path))
    return crypto.load_certificate(crypto.FILETYPE_PEM, issued.cert_chain_pems[0].bytes()).get_serial_number()


def test_a_renewed_key_store_is_served_to_new_connections(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ca = trustme.CA()
    keystore = tmp_path / "server.pem"
    first = write_keystore(keystore, ca)
    server = ServerTls(SslSettings(keystore_location=str(keystore)))
    assert served_serial(server.getContext()) == first
    monkeypatch.setattr(tls, "_RELOAD_CHECK_SECONDS", 0.0)
    second = write_keystore(keystore, trustme.CA())
    assert served_serial(server.getContext()) == second
    keystore.write_text("-----BEGIN CERTIFICATE-----\nhalf written")  # a renewal caught mid-write
    assert served_serial(server.getContext()) == second


def test_unusable_key_material_fails_loudly_without_secrets(tmp_path: Path) -> None:
    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1")
    other = ca.issue_cert("127.0.0.1")
    mismatched = tmp_path / "mismatched.pem"
    mismatched.write_bytes(other.private_key_pem.bytes() + issued.cert_chain_pems[0].bytes())
    with pytest.raises(TlsConfigError, match="does not match"):
        build_context(SslSettings(keystore_location=str(mismatched)))
    with pytest.raises(TlsConfigError, match="cannot read"):
        build_context(SslSettings(keystore_location=str(tmp_path / "missing.pem")))
    inline = SslSettings(keystore_certificate_chain=issued.cert_chain_pems[0].bytes().decode(),
                         keystore_key=Secret(issued.private_key_pem.bytes().decode()))
    assert build_context(inline) is not None
    with pytest.raises(TlsConfigError, match="needs a trust store") as refused:
        build_context(SslSettings(keystore_certificate_chain=inline.keystore_certificate_chain,
                                  keystore_key=inline.keystore_key, client_auth="required"))
    assert "PRIVATE KEY" not in str(refused.value)


def test_client_certificate_principals() -> None:
    ca = trustme.CA()
    alice = ca.issue_cert("alice@example.com", common_name="alice")
    certificate = crypto.load_certificate(crypto.FILETYPE_PEM, alice.cert_chain_pems[0].bytes())
    mapped = SslSettings(principal_mapper=SslPrincipalMapper("RULE:^CN=([^,]+),.*$/$1/,DEFAULT"))
    assert certificate_principal(certificate, mapped) == KafkaPrincipal("User", "alice")
    full = certificate_principal(certificate, SslSettings())
    assert full.name.startswith("CN=alice,")  # DEFAULT: the RFC 2253 distinguished name
    assert certificate_principal(None, mapped) == ANONYMOUS
