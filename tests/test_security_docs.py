"""docs/security.md's "Securing Millrace" section, run as written: its ``sh`` blocks are parsed out of the
page and run in order with bash, from a scratch directory standing in for the repository root, against a
real server. Only what a test machine must change is substituted: the ports (free ones for the Kafka
listeners' 9092 and 9094 and for the native and HTTP listeners' 9090 and 9091, the defaults the page's
server listens on), and ``./scripts/serve.sh`` (the set-up is this test run's own) by the server it runs,
started in the background with a scratch data directory; what a serve block does before its serve
command (writing the first users' file) runs first, as any block. A serve block while a server runs is
the page's restart: the running server is stopped as Ctrl-C stops it (its exit status checked) and the
new one started on the same data directory and ports."""

from __future__ import annotations

import base64
import itertools
import re
import shlex
import shutil
import signal
import ssl
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ports import free_ports
from tests.security.test_oauth import jwk, rsa_key, write_jwks
from tests.server_process import REPO_ROOT, MillraceProcess, ServerProcess, add_scram_args
from tests.tls_files import make_certificates

pytestmark = [pytest.mark.timeout(300),
              pytest.mark.skipif(any(shutil.which(tool) is None for tool in ("kcat", "openssl", "curl", "jq")),
                                 reason="kcat, openssl, curl and jq are needed (scripts/bootstrap.sh installs them)")]

SERVE = "./scripts/serve.sh"
SECURITY_PAGE = Path(REPO_ROOT) / "docs" / "security.md"
# The properties a subsection (its title in the braces) adds to the section's secure/server.properties.
_APPENDED = r"### {}\n.*?cat >> secure/server.properties <<'PROPERTIES'\n(.*?)PROPERTIES\n"


def section_blocks() -> list[str]:
    text = SECURITY_PAGE.read_text()
    section = text[text.index("\n## Securing Millrace\n"):]
    section = section[:section.index("\n## ", 1)]
    return re.findall(r"```sh\n(.*?)```", section, flags=re.DOTALL)


class ReadmeServer(MillraceProcess):
    """The page's serve command, with the set-up script replaced by this checkout's ``millrace``."""

    name = "security page's server"

    def __init__(self, command: str, workdir: Path, ports: dict[str, str]) -> None:
        super().__init__()
        self.args = command.split(SERVE, 1)[1]
        self.workdir = workdir
        self.ports = ports
        self.cwd = str(workdir)  # the page's relative paths (secure/...) are relative to where it runs

    def command(self) -> list[str]:
        # The native and HTTP listeners' default ports (9090, 9091), as the page's clients name them, made
        # free ones (the command's own --native-port or --http-port, if it gave one, coming later wins).
        return ["serve", "--data-dir", str(self.workdir / "data"), "--native-port", self.ports["9090"],
                "--http-port", self.ports["9091"], *shlex.split(self.args)]


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / ".venv").symlink_to(Path(REPO_ROOT) / ".venv")
    yield tmp_path


def run_block(block: str, workdir: Path) -> str:
    """A page's shell block run as written with bash; its standard output."""
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=workdir, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, f"block failed:\n{block}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_page_securing_section_as_written(workdir: Path) -> None:
    blocks = section_blocks()
    ports = dict(zip(("9090", "9091", "9092", "9094"), map(str, free_ports(4)), strict=True))
    servers: list[ReadmeServer] = []
    outputs: list[str] = []
    try:
        for block in blocks:
            block = re.sub(r"\b(9090|9091|9092|9094)\b", lambda m: ports[m.group(1)], block)
            prelude, serve, command = block.partition(SERVE)
            if prelude.strip() and serve:
                assert run_block(prelude, workdir) == ""  # the serve block's set-up prints nothing
            if serve:
                if servers:  # the page's restart: Ctrl-C, then the command again
                    assert servers[-1].stop(signal.SIGINT, timeout=30) == 0
                servers.append(ReadmeServer((serve + command).strip(), workdir, ports).start())
                # No password on the command line, which every local user can read while the server runs.
                assert servers[-1].proc is not None
                cmdline = Path(f"/proc/{servers[-1].proc.pid}/cmdline").read_bytes()
                assert b"--add-scram-file" in cmdline and b"admin-secret" not in cmdline
                continue
            outputs.append(run_block(block, workdir))
        # Started once, then again for the native listener's properties and for the HTTP listener's.
        assert len(servers) == 3, "the section starts its server, and restarts it twice"
        assert len(outputs) == 10, "the section's shell blocks besides its serve commands"
        # The certificates, server.properties, and the properties the native and HTTP listeners add
        # print nothing.
        assert outputs[0] == outputs[1] == outputs[6] == outputs[8] == ""
        assert outputs[2].splitlines() == ["hello, securely"]  # read back by the admin
        # alice, made by `millrace users`, is listed beside admin
        assert outputs[3].splitlines() == ["set SCRAM-SHA-512 credential of user alice",
                                           "admin  SCRAM-SHA-512 (iterations 4096)",
                                           "alice  SCRAM-SHA-512 (iterations 8192)"]
        # granted READ on `secured` by the admin, she reads what the admin wrote, and is refused elsewhere
        assert outputs[4].splitlines() == ["User:alice READ ALLOW TOPIC secured", "hello, securely",
                                           "Topic authorization failed"]
        assert outputs[5].splitlines() == ["batch-loader {'producer_byte_rate': 1048576.0}"]  # a quota set and listed
        # Native, over TLS with SCRAM: the admin's event read back; alice refused in scope iot (her one ACL
        # is READ on the topic `secured`); a client that does not log in gets nothing but its error.
        assert outputs[7].splitlines() == ["sensor-1 21.5", "alice: AuthorizationError", "nobody: AuthenticationError"]
        # HTTPS: a split needs credentials (401), then ALTER on TOPIC iot/readings (alice: 403); the admin's
        # is done (two segments over the stream's key range), and the stream is read without credentials.
        assert outputs[9].splitlines() == [
            '{"error": "authentication required", "type": "AuthenticationRequired"} 401',
            '{"error": "User:alice is not authorized: ALTER on TOPIC \'iot/readings\' is needed", '
            '"type": "NotAuthorized"} 403',
            "[[0,0.5],[0.5,1]]",
            '{"state":"active","epoch":1}']
        for server in servers:
            assert not any("admin-secret" in line or "alice-secret" in line for line in server.output)
        # The recipe's keys, and the first users' passwords, are readable by their owner alone.
        secure = workdir / "secure"
        assert stat.S_IMODE(secure.stat().st_mode) == 0o700
        for name in ("ca.key", "server.key", "keystore.pem", "first-users"):
            assert stat.S_IMODE((secure / name).stat().st_mode) == 0o600, name
        assert servers[-1].stop(signal.SIGTERM, timeout=30) == 0
    finally:
        for server in servers:
            server.kill()


def test_page_oauthbearer_properties_are_accepted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The OAUTHBEARER subsection's properties, laid over the section's ``secure/server.properties``, make a
    listener that takes a token for the audience and issuer they name (its JWKS made here)."""
    import json
    import time

    import jwt
    from cryptography.hazmat.primitives.asymmetric import rsa

    from millrace.gateway.security.oauth import JwtValidator
    from millrace.gateway.security.properties import parse_properties, security_settings

    text = SECURITY_PAGE.read_text()
    section = text[text.index("\n## Securing Millrace\n"):]
    section = section[:section.index("\n## ", 1)]
    base = re.search(r"cat > secure/server.properties <<'PROPERTIES'\n(.*?)PROPERTIES\n", section, flags=re.DOTALL)
    oauth = re.search(r"### OAUTHBEARER\n.*?```properties\n(.*?)```", section, flags=re.DOTALL)
    assert base is not None and oauth is not None, "the section's server.properties and OAUTHBEARER blocks"
    props = parse_properties(base.group(1)) | parse_properties(oauth.group(1))
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (tmp_path / "secure").mkdir()
    entry = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key())) | {"kid": "readme"}
    (tmp_path / "secure" / "jwks.json").write_text(json.dumps({"keys": [entry]}))
    monkeypatch.chdir(tmp_path)  # the page's paths are relative to where the server runs
    listener = security_settings(props).listener("SASL_SSL")
    assert listener.sasl_mechanisms == ("SCRAM-SHA-512", "OAUTHBEARER") and listener.oauthbearer is not None
    now = int(time.time())
    claims = {"sub": "alice", "aud": props["sasl.oauthbearer.expected.audience"],
              "iss": props["sasl.oauthbearer.expected.issuer"], "iat": now, "exp": now + 60}
    token = jwt.encode(claims, key, algorithm="RS256", headers={"kid": "readme"})
    assert JwtValidator(listener.oauthbearer).validate(token).principal_name == "alice"


def test_page_http_properties_are_accepted() -> None:
    """The HTTP subsection's properties, appended to the section's ``secure/server.properties`` after the
    native client subsection's, make an HTTP listener with TLS (the section's key store) that authenticates
    the SCRAM users, reads left open; the Kafka and native listeners stay as they were."""
    from millrace.gateway.security.properties import (
        native_listener_settings,
        parse_properties,
        security_settings,
    )

    text = SECURITY_PAGE.read_text()
    section = text[text.index("\n## Securing Millrace\n"):]
    section = section[:section.index("\n## ", 1)]
    base = re.search(r"cat > secure/server.properties <<'PROPERTIES'\n(.*?)PROPERTIES\n", section, flags=re.DOTALL)
    native = re.search(_APPENDED.format("Native client"), section, flags=re.DOTALL)
    http = re.search(_APPENDED.format("HTTP"), section, flags=re.DOTALL)
    assert base is not None and native is not None and http is not None, \
        "the section's server.properties and the native and HTTP blocks appending to it"
    # The file as the section leaves it: the HTTP block's protocol map, naming both listeners, the last one.
    props = parse_properties(base.group(1) + native.group(1) + http.group(1))
    settings = security_settings(props)
    assert native_listener_settings(props, "127.0.0.1", 9090).security_protocol == "SASL_SSL"
    assert settings.listener("PLAINTEXT").security_protocol == "PLAINTEXT"
    assert settings.listener("SASL_SSL").sasl_mechanisms == ("SCRAM-SHA-512",)
    assert settings.http.authenticates and settings.http.sasl_mechanisms == ("SCRAM-SHA-512",)
    assert settings.http.ssl is not None and settings.http.ssl.keystore_location == "secure/keystore.pem"
    assert not settings.http.authentication_required_for_reads


def test_page_native_properties_are_accepted() -> None:
    """The native client subsection's properties, appended to the section's ``secure/server.properties``,
    make a NATIVE listener with SASL_SSL (the section's key store) serving SCRAM-SHA-512, the Kafka
    listeners unchanged."""
    from millrace.gateway.security.properties import (
        native_listener_settings,
        parse_properties,
        security_settings,
    )

    text = SECURITY_PAGE.read_text()
    section = text[text.index("\n## Securing Millrace\n"):]
    section = section[:section.index("\n## ", 1)]
    base = re.search(r"cat > secure/server.properties <<'PROPERTIES'\n(.*?)PROPERTIES\n", section, flags=re.DOTALL)
    native = re.search(_APPENDED.format("Native client"), section, flags=re.DOTALL)
    assert base is not None and native is not None, "the section's server.properties and the native block"
    props = parse_properties(base.group(1)) | parse_properties(native.group(1))
    assert security_settings(props).listener("SASL_SSL").sasl_mechanisms == ("SCRAM-SHA-512",)
    listener = native_listener_settings(props, "127.0.0.1", 9090)
    assert listener.security_protocol == "SASL_SSL" and listener.sasl_mechanisms == ("SCRAM-SHA-512",)
    assert listener.ssl is not None and listener.ssl.keystore_location == "secure/keystore.pem"


def readme_properties() -> dict[str, str]:
    """The section's ``secure/server.properties`` and the properties each subsection adds to it, by title."""
    text = SECURITY_PAGE.read_text()
    section = text[text.index("\n## Securing Millrace\n"):]
    section = section[:section.index("\n## ", 1)]
    base = re.search(r"cat > secure/server.properties <<'PROPERTIES'\n(.*?)PROPERTIES\n", section, flags=re.DOTALL)
    oauth = re.search(r"### OAUTHBEARER\n.*?```properties\n(.*?)```", section, flags=re.DOTALL)
    native = re.search(_APPENDED.format("Native client"), section, flags=re.DOTALL)
    http = re.search(_APPENDED.format("HTTP"), section, flags=re.DOTALL)
    assert base and oauth and native and http, "the section's server.properties and its subsections' additions"
    return {"base": base.group(1), "OAUTHBEARER": oauth.group(1), "Native client": native.group(1),
            "HTTP": http.group(1)}


@pytest.mark.parametrize("order", list(itertools.permutations(["OAUTHBEARER", "Native client", "HTTP"])))
def test_page_subsections_combine_in_any_order(order: tuple[str, ...], tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Every subsection's properties laid over the section's, in any order, make settings the server starts
    with: OAUTHBEARER stays on the Kafka listener that names its JAAS entry; HTTP and NATIVE, without
    OAUTHBEARER settings of their own, serve the SCRAM logins their own entries name rather than stopping
    the server (before, HTTP took the broker-wide mechanisms and refused to start without an OAUTHBEARER
    entry of its own). The HTTP block's protocol map names both listeners and replaces the native block's:
    where the native block comes last, its map (without HTTP) wins and HTTP is plain, as the page says."""
    from millrace.gateway.security.properties import (
        native_listener_settings,
        parse_properties,
        security_settings,
    )

    parts = readme_properties()
    props = parse_properties(parts["base"] + "".join(parts[title] for title in order))
    (tmp_path / "secure").mkdir()
    (tmp_path / "secure" / "jwks.json").write_text('{"keys": []}')
    monkeypatch.chdir(tmp_path)  # the page's paths are relative to where the server runs
    settings = security_settings(props)
    assert settings.listener("SASL_SSL").sasl_mechanisms == ("SCRAM-SHA-512", "OAUTHBEARER")
    if order.index("HTTP") > order.index("Native client"):
        assert settings.http.sasl_mechanisms == ("SCRAM-SHA-512",) and settings.http.oauthbearer is None
    else:
        assert settings.http.security_protocol == "PLAINTEXT"
    native = native_listener_settings(props, "127.0.0.1", 9090)
    assert native.sasl_mechanisms == ("SCRAM-SHA-512",) and native.oauthbearer is None


def test_page_oauthbearer_and_http_subsections_together_start_a_server(tmp_path: Path) -> None:
    """The server itself starts on the combined properties (it refused to before), HTTP asking Basic
    credentials of a change and taking a SCRAM user's."""
    import json
    import urllib.error
    import urllib.request

    certificates = make_certificates(tmp_path)
    parts = readme_properties()
    (tmp_path / "secure").mkdir()
    shutil.copy(certificates.server_pem, tmp_path / "secure" / "keystore.pem")
    write_jwks(tmp_path / "secure" / "jwks.json", jwk(rsa_key(), "readme"))
    ports = dict(zip(("9092", "9094"), map(str, free_ports(2)), strict=True))
    text = re.sub(r"\b(9092|9094)\b", lambda m: ports[m.group(1)],
                  parts["base"] + parts["OAUTHBEARER"] + parts["Native client"] + parts["HTTP"])
    (tmp_path / "secure" / "server.properties").write_text(text)
    server = ServerProcess(str(tmp_path / "data"), "--config", "secure/server.properties",
                           *add_scram_args(tmp_path, "SCRAM-SHA-512=[name=admin,password=admin-secret]"))
    server.cwd = str(tmp_path)
    with server:
        url = f"https://127.0.0.1:{server.http_port}/api/streams/iot/readings/split"
        context = ssl.create_default_context(cafile=str(certificates.ca_pem))
        request = urllib.request.Request(url, data=json.dumps({"segment": 0, "pieces": 2}).encode(),
                                         headers={"content-type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, context=context, timeout=30)
        assert refused.value.code == 401 and refused.value.headers["WWW-Authenticate"].startswith("Basic")
        request.add_header("authorization", "Basic " + base64.b64encode(b"admin:admin-secret").decode())
        with pytest.raises(urllib.error.HTTPError) as missing:  # past authentication: the stream is not there
            urllib.request.urlopen(request, context=context, timeout=30)
        assert missing.value.code == 404
