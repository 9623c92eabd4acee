"""Sanitization of everything a run directory holds.

Artifacts are shared between teams, so they must carry no credentials, internal hostnames,
user names, home paths, private IP addresses or private registry names. A :class:`Sanitizer`
replaces each such value with a stable placeholder (the same value always gets the same
placeholder within a run directory, so two artifacts can still be compared):

- ``<secret-env-NAME>``  the value of an environment variable whose name looks secret
  (``*TOKEN*``, ``*PASSWORD*``, ``*API_KEY*`` ...), wherever it appears;
- ``<secret-N>``     a value recognised by its shape (GitHub/GitLab/Hugging Face/Slack/AWS
  tokens, JWTs, ``Bearer ...``, private keys) or by its key (``password=...``,
  ``"api_token": ...``);
- ``<credentials>``  the ``user:password`` part of a URL;
- ``<home>``, ``<user>``  this process's home directory and user name;
- ``<user-N>``  the owners of other home directories (``/home/NAME``);
- ``<host-N>``  this machine's host names, names found in scheduler variables (``HOSTNAME``,
  ``SLURM_NODELIST``, ``MASTER_ADDR`` ...), internal domains (``*.internal``, ``*.corp``,
  ``*.local`` ...) and ``host:port/`` references such as private registries;
- ``<ip-N>``  private, link-local and carrier-grade NAT addresses (loopback is kept);
- ``<redacted-N>``   matches of the configured extra patterns.

Numbered placeholders continue after the highest number already present in the run directory,
so a resumed campaign never gives one placeholder two meanings; and a resumed campaign gives a
value the placeholder it had before: the private value -> placeholder map (salted SHA-256 of the
values, never the values) is kept outside the shared run directory, under the user's cache
(``$ORCHESTRATOR_PRIVATE_DIR``, else ``$XDG_CACHE_HOME/orchestrator/private``, else
``~/.cache/orchestrator/private``), keyed by the run id in ``run_id.txt``.

Binary vendor profiler reports (``.nsys-rep``, ``.msys-rep``, ``.ncu-rep``, ``.mcu-rep``, their
``.sqlite`` exports) can hold host names and command lines and cannot be rewritten: unless
``sanitize.keep_vendor_reports`` is true they are moved out of the run directory into that
private store when the run directory is sealed. Gzipped files are decompressed, sanitized and
recompressed. The text transform is pure given its inputs; :func:`sanitize_run_dir` is the thin
file-walking shell (atomic rewrites).
"""

from __future__ import annotations

import dataclasses
import getpass
import gzip
import hashlib
import ipaddress
import json
import logging
import math
import os
import re
import secrets as _secrets
import shutil
import socket
import tempfile
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.core.records import CACHES

log = logging.getLogger(__name__)

# variable / key names whose values are secrets
SECRET_NAME = re.compile(
    r"(?i)(token(?!s|iz)|secret|passw(or)?d|passwd|api[_-]?key|access[_-]?key|private[_-]?key|"
    r"credential|creds?(?![a-z])|auth(?!or)|cookie|session[_-]?id|_key$|^key$)"
)
# a value shaped like a generated credential, whatever its variable's name: one word of 20+
# characters from a token alphabet, with upper and lower case letters and digits, and at
# least 3.5 bits of entropy per character (a path, a word list or a hex digest is not)
_TOKEN_ALPHABET = re.compile(r"^[A-Za-z0-9_\-+/=.~]{20,512}$")


def looks_like_credential(value: str) -> bool:
    if not _TOKEN_ALPHABET.match(value) or value.startswith(("/", ".", "~")):
        return False
    if not (re.search(r"[a-z]", value) and re.search(r"[A-Z]", value)
            and re.search(r"[0-9]", value)):
        return False
    if TOKEN_SHAPE.fullmatch(value):
        return True
    n = len(value)
    counts: dict[str, int] = {}
    for ch in value:
        counts[ch] = counts.get(ch, 0) + 1
    bits = -sum(c / n * math.log2(c / n) for c in counts.values())
    return bits >= 3.5


def is_secret_env(name: str, value: str) -> bool:
    """A variable whose value the sanitizer hunts for in every file: a secret name (and a
    value that is not generic), or a value that looks like a credential."""
    if len(value) < 6 or value.lower() in _GENERIC_VALUES or value.replace(".", "").isdigit():
        return False
    return is_secret_name(name) or looks_like_credential(value)
# secret-named variables whose values are too generic to hunt for in text (`true`, `1`)
_GENERIC_VALUES = frozenset({"true", "false", "none", "null", "yes", "no", "on", "off"})

_TOKEN_SHAPES = [
    r"gh[pousr]_[A-Za-z0-9]{20,}",
    r"github_pat_[A-Za-z0-9_]{20,}",
    r"glpat-[A-Za-z0-9_\-]{20,}",
    r"hf_[A-Za-z0-9]{20,}",
    r"xox[abprs]-[A-Za-z0-9\-]{10,}",
    r"(?:AKIA|ASIA)[0-9A-Z]{16}",
    r"sk-[A-Za-z0-9_\-]{20,}",
    r"npm_[A-Za-z0-9]{30,}",
    r"pypi-[A-Za-z0-9_\-]{30,}",
    r"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}",  # JWT
]
TOKEN_SHAPE = re.compile(r"(?<![A-Za-z0-9_\-])(?:" + "|".join(_TOKEN_SHAPES) + r")")
PRIVATE_KEY_BLOCK = re.compile(
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)", re.DOTALL
)
BEARER = re.compile(r"(?i)\b(bearer|basic)\s+([A-Za-z0-9._~+/=\-]{8,})")
# `password=xyz`, `api_key: "xyz"`, `--token xyz`
KEYED_SECRET = re.compile(
    r"(?i)(?P<key>\b[\w.\-]*(?:token|secret|passw(?:or)?d|passwd|api[_-]?key|access[_-]?key|"
    r"private[_-]?key|credential)s?\b)(?P<sep>[\"']?\s*[=:]\s*[\"']?)"
    r"(?P<val>(?!<)(?![\d.]+(?:[\s\"',;&}\]]|$))[^\s\"',;&}\]]{4,})"
)
# a --flag that takes a secret: `--token xyz`, `--api-key=xyz`
FLAG_SECRET = re.compile(
    r"(?i)(?P<key>--[\w\-]*(?:token|secret|password|passwd|api-key|access-key)\b)"
    r"(?P<sep>[= ])(?P<val>(?!<)[^\s\"']{4,})"
)
URL_CREDENTIALS = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/\s:@\"']+:[^/\s@\"']+@")
IPV4 = re.compile(r"(?<![\d.])(\d{1,3}(?:\.\d{1,3}){3})(?!\d|\.\d)")
IPV6 = re.compile(r"(?i)(?<![0-9a-f:])((?:f[cd][0-9a-f]{2}|fe80):[0-9a-f:]{2,})(?![0-9a-f:])")
INTERNAL_HOST = re.compile(
    r"(?i)\b((?:[a-z0-9](?:[a-z0-9\-]{0,61}[a-z0-9])?\.)+"
    r"(?:internal|intranet|intra|corp|local|localdomain|lan|home|private|cluster|priv))\b"
)
# host:port/ (a registry or service with an explicit port), e.g. registry.acme:5000/team/image
HOST_PORT = re.compile(r"(?i)(?<![\w.\-/:@<])([a-z][a-z0-9\-]*(?:\.[a-z0-9\-]+)*):(\d{2,5})/")
HOME_PATH = re.compile(r"(?<![\w.\-])/(home|Users)/(?!<)([^/\s\"':]+)")
PLACEHOLDER = re.compile(r"<(secret|user|host|ip|redacted)-(\d+)>")

# account and host names too generic to identify anyone; replacing them would wreck prose
GENERIC_NAMES = frozenset(
    {"root", "user", "admin", "ubuntu", "debian", "nobody", "runner", "jovyan", "ec2-user",
     "localhost", "localhost.localdomain", "docker", "builder", "worker", "node", "gpu", "cpu",
     "host", "secret", "home", "redacted", "credentials"}
)
# scheduler/launcher variables that name hosts
HOST_VARS = ("HOSTNAME", "HOST", "SLURMD_NODENAME", "SLURM_SUBMIT_HOST", "SLURM_NODELIST",
             "SLURM_JOB_NODELIST", "SLURM_STEP_NODELIST", "MASTER_ADDR", "PBS_O_HOST")
USER_VARS = ("USER", "LOGNAME", "USERNAME", "SUDO_USER", "SLURM_JOB_USER")
# vendor profiler reports: binary, may hold host names and command lines, cannot be rewritten
VENDOR_REPORT_SUFFIXES = (".msys-rep", ".mcu-rep", ".nsys-rep", ".ncu-rep", ".qdrep", ".sqlite")
BINARY_SUFFIXES = (".png", ".jpg", ".jpeg", ".pdf", ".pt", ".pth", ".npz", ".npy", ".pkl",
                   ".safetensors", *VENDOR_REPORT_SUFFIXES)
RUN_ID_FILE = "run_id.txt"
PRIVATE_DIR_VAR = "ORCHESTRATOR_PRIVATE_DIR"
PLACEHOLDER_MAP = "placeholders.json"


@dataclass(frozen=True)
class Identity:
    """What identifies the machine and the person: collected once, from the process."""

    hostnames: tuple[str, ...] = ()
    users: tuple[str, ...] = ()
    homes: tuple[str, ...] = ()
    # environment variable name -> value, for variables whose name looks secret
    secret_env: tuple[tuple[str, str], ...] = ()

    @classmethod
    def detect(cls, environ: Mapping[str, str] | None = None) -> Identity:
        env = dict(os.environ if environ is None else environ)
        hosts: set[str] = set()
        for h in (_safe(socket.gethostname), _safe(socket.getfqdn)):
            if h:
                hosts.add(h)
                hosts.add(h.split(".")[0])
        for var in HOST_VARS:
            for h in _split_hosts(env.get(var, "")):
                hosts.add(h)
        users = {env.get(v, "") for v in USER_VARS} | {_safe(getpass.getuser)}
        homes = {env.get("HOME", ""), os.path.expanduser("~")}
        secret = sorted((k, v) for k, v in env.items() if is_secret_env(k, v))
        return cls(
            hostnames=_keep(hosts),
            users=_keep(users),
            homes=tuple(sorted({h.rstrip("/") for h in homes if h and h.rstrip("/") not in ("", "/")},
                               key=len, reverse=True)),
            secret_env=tuple(secret),
        )


def _safe(fn: Any) -> str:
    try:
        return str(fn())
    except Exception:  # no user database entry, no resolver: nothing to hide from that source
        return ""


def _split_hosts(value: str) -> list[str]:
    """Host names in a variable; a Slurm node list such as ``gpu[01-03],login1`` yields its
    prefixes (``gpu``), which are then matched with any digits after them."""
    out = []
    for part in re.split(r"[,\s]+", value):
        part = part.strip()
        if not part or _is_ip(part):
            continue
        out.append(part.split("[")[0] if "[" in part else part)
    return out


def _keep(names: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted({n for n in names if n and len(n) >= 3 and n.lower() not in GENERIC_NAMES},
                        key=len, reverse=True))


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return False


def is_secret_name(name: str) -> bool:
    return bool(SECRET_NAME.search(name))


def _private_ip(text: str) -> bool:
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return False
    return (ip.is_private or ip.is_link_local or ip in ipaddress.ip_network("100.64.0.0/10")) and \
        not ip.is_loopback and not ip.is_unspecified


@dataclass
class Sanitizer:
    """Replace identifying values by stable placeholders. One instance per run directory."""

    identity: Identity = field(default_factory=Identity)
    keep_hostnames: bool = False
    extra_patterns: tuple[str, ...] = ()
    keep_vendor_reports: bool = False
    _maps: dict[str, dict[str, str]] = field(default_factory=dict, repr=False)
    _next: dict[str, int] = field(default_factory=dict, repr=False)
    # the private store of a run directory (bind_run_dir): salted value hash -> placeholder
    _store: Path | None = field(default=None, repr=False)
    _salt: str = field(default="", repr=False)
    _known: dict[str, dict[str, str]] = field(default_factory=dict, repr=False)
    _dirty: bool = field(default=False, repr=False)

    def __post_init__(self) -> None:
        self._extra = [re.compile(p) for p in self.extra_patterns]
        self._secret_env = sorted(self.identity.secret_env, key=lambda kv: len(kv[1]), reverse=True)
        hosts = [] if self.keep_hostnames else list(self.identity.hostnames)
        # a bare host name also matches as a prefix of numbered nodes (gpu-node -> gpu-node17)
        self._host_re = (
            re.compile(r"(?i)(?<![\w\-.])(" + "|".join(re.escape(h) for h in hosts)
                       + r")(\d*)((?:\.[a-z0-9\-]+)*)(?![\w\-])")
            if hosts else None
        )
        users = list(self.identity.users)
        self._user_re = (
            re.compile(r"(?<![A-Za-z0-9])(" + "|".join(re.escape(u) for u in users)
                       + r")(?![A-Za-z0-9])")
            if users else None
        )

    @classmethod
    def from_config(cls, cfg: Any = None, environ: Mapping[str, str] | None = None) -> Sanitizer:
        """From a :class:`orchestrator.spec.config.SanitizeConfig` (or None for the defaults)."""
        return cls(
            identity=Identity.detect(environ),
            keep_hostnames=bool(getattr(cfg, "keep_hostnames", False)),
            extra_patterns=tuple(getattr(cfg, "extra_patterns", None) or ()),
            keep_vendor_reports=bool(getattr(cfg, "keep_vendor_reports", False)),
        )

    def add_hostnames(self, names: Iterable[str]) -> None:
        """Host names learned after the start (the compute nodes a Slurm job ran on, reported
        by the job itself): replaced from now on, like this machine's own."""
        known = set(self.identity.hostnames)
        new = {h for n in names if n for h in (n, n.split(".")[0])} - known
        if not _keep(new):
            return
        self.identity = dataclasses.replace(self.identity,
                                            hostnames=_keep(known | new))
        self.__post_init__()  # the patterns; placeholders already handed out stay

    def add_secret_env(self, pairs: Iterable[tuple[str, str]]) -> None:
        """Values of secret-named variables beyond this process's environment: every arm's
        ``env.*`` switch (two arms may give one variable two secret values)."""
        known = set(self.identity.secret_env)
        new = {(k, v) for k, v in pairs if is_secret_env(k, v)} - known
        if new:
            self.identity = dataclasses.replace(self.identity,
                                                secret_env=tuple(sorted(known | new)))
            self.__post_init__()

    # ------------------------------------------------------------------ placeholders

    def _placeholder(self, kind: str, value: str) -> str:
        table = self._maps.setdefault(kind, {})
        if value not in table:
            key = self._hash(value)
            known = self._known.setdefault(kind, {})
            if key in known:  # seen by an earlier session on this run directory
                table[value] = known[key]
            else:
                n = self._next.get(kind, 0) + 1
                self._next[kind] = n
                table[value] = known[key] = f"<{kind}-{n}>"
                self._dirty = self._store is not None
        return table[value]

    def _hash(self, value: str) -> str:
        salted = (self._salt + "\0" + value).encode("utf-8", "surrogateescape")
        return hashlib.sha256(salted).hexdigest()

    def bind_run_dir(self, run_dir: str | os.PathLike[str]) -> Path | None:
        """Reuse (and from now on keep) the placeholders earlier sessions gave values in this
        run directory. The map lives in the private store, outside the run directory; it holds
        salted hashes of the values, not the values. Returns the map's path (None when no
        private store can be used: numbering then still continues after the run directory's)."""
        store = private_dir(run_dir)
        if store is None:
            return None
        path = store / PLACEHOLDER_MAP
        try:
            data = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
        except (OSError, ValueError) as exc:
            log.warning("placeholder map %s unreadable (%s): numbering continues instead",
                        path, exc)
            data = {}
        if self._store != path:  # first binding: the store's salt and map replace ours
            self._salt = str(data.get("salt") or _secrets.token_hex(16))
            before, self._known = self._maps, {}
            for kind, table in (data.get("maps") or {}).items():
                self._known[kind] = {str(k): str(v) for k, v in table.items()}
            for kind, seen in before.items():  # values met before binding keep theirs
                for value, ph in seen.items():
                    self._known.setdefault(kind, {}).setdefault(self._hash(value), ph)
            self._dirty = True
        else:
            for kind, table in (data.get("maps") or {}).items():
                self._known.setdefault(kind, {}).update(table)
        for kind, n in (data.get("next") or {}).items():
            self._next[kind] = max(self._next.get(kind, 0), int(n))
        self._store = path
        return path

    def flush(self) -> None:
        """Write the placeholder map to the private store when it gained entries."""
        if self._store is None or not self._dirty:
            return
        self._store.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        body = json.dumps({"salt": self._salt, "maps": self._known, "next": self._next},
                          sort_keys=True)
        _atomic_write_bytes(self._store, body.encode("utf-8"), mode=0o600)
        self._dirty = False

    def reserve(self, text: str) -> None:
        """Continue numbering after placeholders already present (a resumed run directory)."""
        for m in PLACEHOLDER.finditer(text):
            self._next[m.group(1)] = max(self._next.get(m.group(1), 0), int(m.group(2)))

    # ------------------------------------------------------------------ the transform

    def text(self, s: str) -> str:
        if not s:
            return s
        s = PRIVATE_KEY_BLOCK.sub(lambda m: self._placeholder("secret", m.group(0)), s)
        for name, value in self._secret_env:
            if value in s:
                s = s.replace(value, f"<secret-env-{name}>")
        s = URL_CREDENTIALS.sub(lambda m: m.group(1) + "<credentials>@", s)
        s = TOKEN_SHAPE.sub(lambda m: self._placeholder("secret", m.group(0)), s)
        s = BEARER.sub(lambda m: f"{m.group(1)} " + self._placeholder("secret", m.group(2)), s)
        for rx in (KEYED_SECRET, FLAG_SECRET):
            s = rx.sub(
                lambda m: m.group("key") + m.group("sep") + self._placeholder("secret", m.group("val")),
                s,
            )
        for rx in self._extra:
            s = rx.sub(lambda m: self._placeholder("redacted", m.group(0)), s)
        for home in self.identity.homes:
            s = re.sub(re.escape(home) + r"(?![\w.\-])", "<home>", s)
        s = HOME_PATH.sub(lambda m: f"/{m.group(1)}/" + self._placeholder("user", m.group(2)), s)
        if self._user_re is not None:
            s = self._user_re.sub("<user>", s)
        if not self.keep_hostnames:
            if self._host_re is not None:
                s = self._host_re.sub(self._host_sub, s)
            s = INTERNAL_HOST.sub(lambda m: self._placeholder("host", m.group(1).lower()), s)
            s = HOST_PORT.sub(lambda m: self._placeholder("host", m.group(1).lower())
                              + f":{m.group(2)}/" if m.group(1).lower() != "localhost"
                              else m.group(0), s)
        s = IPV4.sub(lambda m: self._placeholder("ip", m.group(1))
                     if _private_ip(m.group(1)) else m.group(0), s)
        s = IPV6.sub(lambda m: self._placeholder("ip", m.group(1).lower())
                     if _private_ip(m.group(1)) else m.group(0), s)
        return s

    def _host_sub(self, m: re.Match[str]) -> str:
        return self._placeholder("host", m.group(0).lower())

    def data(self, obj: Any, key: str = "") -> Any:
        """A JSON-able tree with every string sanitized; values under secret-looking keys are
        replaced whole."""
        if isinstance(obj, dict):
            return {self.text(str(k)): self._value(str(k), v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [self.data(v, key) for v in obj]
        if isinstance(obj, str):
            return self.text(obj)
        return obj

    def _value(self, key: str, v: Any) -> Any:
        if is_secret_name(key) and isinstance(v, str) and v and not v.startswith("<"):
            return self._placeholder("secret", v)
        return self.data(v, key)

    def env(self, environ: Mapping[str, str]) -> dict[str, str]:
        """An environment mapping: secret-named variables masked by name."""
        return {k: (f"<secret-env-{k}>" if is_secret_name(k) and v else self.text(v))
                for k, v in environ.items()}

    # ------------------------------------------------------------------ files

    def file(self, path: Path) -> bool:
        """Sanitize one file in place (atomically). True when its content changed."""
        name = path.name.lower()
        if name.endswith(BINARY_SUFFIXES):
            return False
        raw = path.read_bytes()
        gz = name.endswith(".gz")
        body = gzip.decompress(raw) if gz else raw
        text = body.decode("utf-8", errors="surrogateescape")
        new = self._file_text(name[:-3] if gz else name, text)
        self.flush()
        if new == text:
            return False
        out = new.encode("utf-8", errors="surrogateescape")
        _atomic_write_bytes(path, gzip.compress(out) if gz else out)
        return True

    def _file_text(self, name: str, text: str) -> str:
        if name.endswith(".json"):
            try:
                data = json.loads(text)
            except json.JSONDecodeError:
                return self.text(text)
            clean = self.data(data)
            if clean == data:
                return text
            return json.dumps(clean, indent=2, default=str) + ("\n" if text.endswith("\n") else "")
        if name.endswith(".jsonl"):
            return "\n".join(self._file_text(".json", line) if line.strip() else line
                             for line in text.split("\n"))
        return self.text(text)


def _atomic_write_bytes(path: Path, data: bytes, mode: int | None = None) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        if mode is not None:
            os.chmod(tmp, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _text_files(root: Path) -> list[Path]:
    """Every file of ``root`` but temporaries and the arms' compile caches (binary scratch a
    resume reuses and the campaign's end deletes: rewriting a kernel would corrupt it)."""
    caches = root / CACHES
    return sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()
                  and not p.name.endswith(".tmp") and caches not in p.parents)


def user_store(name: str, env_var: str) -> Path:
    """A folder of the user's own (``$env_var``, else ``$XDG_CACHE_HOME`` or ``~/.cache``,
    then ``orchestrator/<name>``), outside every run directory."""
    env = os.environ.get(env_var)
    if env:
        return Path(env).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "orchestrator" / name


def private_root() -> Path:
    """Where private, never-shared data of run directories lives (outside every run dir)."""
    return user_store("private", PRIVATE_DIR_VAR)


def run_id(run_dir: str | os.PathLike[str]) -> str:
    """The run directory's random id (``run_id.txt``; created on first use): it keys the
    private store, identifies nothing, and moves with the run directory."""
    path = Path(run_dir) / RUN_ID_FILE
    try:
        text = path.read_text(encoding="utf-8").strip()
        if re.fullmatch(r"[0-9a-f]{32}", text):
            return text
    except OSError:
        pass
    rid = uuid.uuid4().hex
    path.parent.mkdir(parents=True, exist_ok=True)
    _atomic_write_bytes(path, (rid + "\n").encode())
    return rid


def private_dir(run_dir: str | os.PathLike[str]) -> Path | None:
    """This run directory's private store, or None when it would sit inside the run
    directory (a misconfigured ``ORCHESTRATOR_PRIVATE_DIR``)."""
    root = private_root()
    run = Path(run_dir).resolve()
    try:
        root.resolve().relative_to(run)
    except ValueError:
        return root / run_id(run_dir)
    log.warning("%s=%s is inside the run directory: no private store used", PRIVATE_DIR_VAR, root)
    return None


def remove_vendor_reports(run_dir: str | os.PathLike[str]) -> list[tuple[Path, Path]]:
    """Move the binary vendor profiler reports out of ``run_dir`` into its private store
    (same relative paths); returns (old, new) pairs. Reports that cannot be moved are deleted:
    an unsanitizable file never stays in a shared run directory by default."""
    root = Path(run_dir)
    moved = []
    reports = [p for p in _text_files(root) if p.name.lower().endswith(VENDOR_REPORT_SUFFIXES)]
    store = private_dir(root) if reports else None
    for p in reports:
        rel = p.relative_to(root)
        try:
            if store is None:
                raise OSError("no private store")
            dest = store / "vendor_reports" / rel
            dest.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            shutil.move(str(p), str(dest))
            moved.append((p, dest))
        except OSError as exc:
            log.warning("vendor report %s not movable (%s): deleted from the run directory",
                        rel, exc)
            p.unlink(missing_ok=True)
    return moved


def reserve_run_dir(run_dir: str | os.PathLike[str], sanitizer: Sanitizer) -> None:
    """Make ``sanitizer`` give values the placeholders they had in earlier sessions on
    ``run_dir`` (the private map) and number past every placeholder already in it (resume)."""
    try:
        sanitizer.bind_run_dir(run_dir)
    except OSError as exc:
        log.warning("private placeholder map unavailable (%s): numbering continues instead", exc)
    for p in _text_files(Path(run_dir)):
        if not p.name.lower().endswith(BINARY_SUFFIXES + (".gz",)):
            try:
                sanitizer.reserve(p.read_text(encoding="utf-8", errors="replace"))
            except OSError:
                continue


def sanitize_run_dir(run_dir: str | os.PathLike[str], sanitizer: Sanitizer) -> list[Path]:
    """Sanitize every file under ``run_dir``; the files that changed are returned. Files being
    written right now by someone else are not expected: this runs when the campaign is done."""
    root = Path(run_dir)
    reserve_run_dir(root, sanitizer)
    if not sanitizer.keep_vendor_reports:
        for old, new in remove_vendor_reports(root):
            log.info("vendor report %s moved out of the run directory to the private store "
                     "(sanitize.keep_vendor_reports=false)", old.relative_to(root))
    changed = []
    for p in _text_files(root):
        try:
            if sanitizer.file(p):
                changed.append(p)
        except (OSError, EOFError, gzip.BadGzipFile) as exc:
            log.warning("could not sanitize %s: %s", p.relative_to(root), exc)
    sanitizer.flush()
    return changed
