"""Who may change a cluster's znodes: ZooKeeper digest authentication and the ACL every znode gets.

A secured cluster's nodes share one ZooKeeper identity, ``digest:USER:PASSWORD``, read from a file
(``millrace serve --zookeeper-credentials FILE``): a file rather than a flag or a property, so the
password is never on a command line (``ps``, ``/proc/PID/cmdline``, the local cluster's state file)
and is kept, like a key, readable by its owner only. Two formats are read:

    username=millrace                       # the simple one (``#`` starts a comment)
    password=...

or the JAAS file Kafka's brokers are given for ZooKeeper (``-Djava.security.auth.login.config``),
whose ``Client`` section names the same two options::

    Client {
      org.apache.zookeeper.server.auth.DigestLoginModule required
      username="millrace" password="...";
    };

Every session adds the digest (kazoo ``auth_data``, sent again on each reconnect) and every znode it
creates, the cluster's root included, gets one ACL: that identity, all permissions
(``make_digest_acl(..., all=True)``). Nothing else may create, change or delete anything below the
root, nor read it (only ``exists`` is never checked by ZooKeeper). A session without the identity
gets ``NoAuthError`` for any change, which ``ZooKeeperAccessError`` explains at a node's start.
Without credentials znodes are created open (``OPEN_ACL_UNSAFE``), as before.
"""

from __future__ import annotations

import logging
import os
import re
import stat
from dataclasses import dataclass, field

from kazoo.security import ACL, make_digest_acl

log = logging.getLogger(__name__)

_JAAS_SECTION = re.compile(r"(?:^|[\s;}])Client\s*\{(?P<body>.*?)\}\s*;", re.S)
_JAAS_OPTION = re.compile(r'(?P<key>[A-Za-z_][\w.-]*)\s*=\s*"(?P<value>(?:[^"\\]|\\.)*)"')


class ZooKeeperCredentialsError(ValueError):
    """A credentials file that cannot be used (the message names the file, never the password)."""


class ZooKeeperAccessError(RuntimeError):
    """ZooKeeper refused this session a change of the cluster's znodes (NoAuth): the cluster is
    secured with other credentials, or this node was given none."""


@dataclass(frozen=True)
class ZooKeeperCredentials:
    """One digest identity; the password never shows in a ``repr``."""

    username: str
    password: str = field(repr=False)

    def __post_init__(self) -> None:
        if not self.username or ":" in self.username:
            raise ZooKeeperCredentialsError("a ZooKeeper digest user name must be non-empty and have no ':'")
        if not self.password:
            raise ZooKeeperCredentialsError("a ZooKeeper digest password must not be empty")

    @property
    def auth_data(self) -> list[tuple[str, str]]:
        """What kazoo sends (``add_auth``) on every connection."""
        return [("digest", f"{self.username}:{self.password}")]

    @property
    def acl(self) -> list[ACL]:
        """The ACL of every znode the cluster creates: this identity may do anything, nobody else anything."""
        return [make_digest_acl(self.username, self.password, all=True)]

    @property
    def identity(self) -> str:
        """The ACL id (``user:base64(sha1(user:password))``): no secret, what ``getACL`` shows."""
        return self.acl[0].id.id

    @classmethod
    def parse(cls, text: str, what: str = "the ZooKeeper credentials") -> ZooKeeperCredentials:
        """Credentials from ``username=``/``password=`` lines or a JAAS file's ``Client`` section."""
        options: dict[str, str] = {}
        if "{" in text:
            section = _JAAS_SECTION.search(text)
            if section is None:
                raise ZooKeeperCredentialsError(f"{what}: a JAAS file needs a Client {{ ... }}; section")
            for m in _JAAS_OPTION.finditer(section.group("body")):
                options[m.group("key")] = re.sub(r"\\(.)", r"\1", m.group("value"))
        else:
            for number, raw in enumerate(text.splitlines(), 1):
                line = raw.strip()
                if not line or line.startswith(("#", "!")):
                    continue
                key, sep, value = line.partition("=")
                if not sep:
                    raise ZooKeeperCredentialsError(f"{what}, line {number}: expected KEY=VALUE")
                options[key.strip()] = value.strip()
        missing = [k for k in ("username", "password") if not options.get(k)]
        if missing:
            raise ZooKeeperCredentialsError(f"{what}: no {' and no '.join(missing)}")
        return cls(options["username"], options["password"])

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ZooKeeperCredentials:
        """Read ``path``; warns when others than its owner may read it."""
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
            mode = os.stat(path).st_mode
        except OSError as e:
            raise ZooKeeperCredentialsError(f"cannot read the ZooKeeper credentials {path}: {e.strerror}") from None
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            log.warning("%s (ZooKeeper credentials) may be read by others than its owner: chmod 600 it", path)
        return cls.parse(text, f"the ZooKeeper credentials {path}")

    def write(self, path: str | os.PathLike[str]) -> None:
        """Write them in the simple format, readable by the owner only (never over an existing file)."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(f"# ZooKeeper digest identity of a Millrace cluster's nodes\n"
                    f"username={self.username}\npassword={self.password}\n")


def access_error(root: str, credentials: ZooKeeperCredentials | None) -> ZooKeeperAccessError:
    """What to tell an operator whose node ZooKeeper refused (NoAuth) under the cluster's ``root``."""
    if credentials is None:
        why = ("the cluster is secured (its znodes carry ACLs) and this node has no credentials: "
               "give it the cluster's --zookeeper-credentials FILE")
    else:
        why = (f"this node's digest identity {credentials.username!r} is not the one the cluster's znodes "
               "allow: give it the cluster's --zookeeper-credentials FILE")
    return ZooKeeperAccessError(f"ZooKeeper refused this node a change under {root} (NoAuth): {why}")
