"""Certificates for loopback TLS tests, issued with the openssl command line: a private CA, server
certificates for 127.0.0.1, and client certificates (mTLS), valid for a day or for a few seconds."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

_KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")


def _openssl(*args: str, cwd: Path | None = None) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60, cwd=cwd)


@dataclass(frozen=True)
class Issued:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Authority:
    """A CA with an `openssl ca` database, so that certificates can end at any second."""

    directory: Path
    cert: Path
    key: Path

    @classmethod
    def create(cls, directory: Path, name: str = "test-ca") -> Authority:
        directory.mkdir(parents=True, exist_ok=True)
        cert, key = directory / "ca.crt", directory / "ca.key"
        _openssl(
            *("req", "-x509", *_KEY, "-days", "2", "-keyout", str(key), "-out", str(cert), "-subj", f"/CN={name}"),
            *("-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"),
        )
        (directory / "index.txt").write_text("")
        (directory / "serial").write_text("1000\n")
        (directory / "ca.cnf").write_text(
            "[ca]\ndefault_ca = test\n[test]\n"
            f"dir = {directory}\ndatabase = $dir/index.txt\nserial = $dir/serial\nnew_certs_dir = $dir\n"
            "certificate = $dir/ca.crt\nprivate_key = $dir/ca.key\ndefault_md = sha256\npolicy = any\n"
            "unique_subject = no\ncopy_extensions = none\n[any]\ncommonName = supplied\n"
            "[server]\nsubjectAltName = IP:127.0.0.1\nextendedKeyUsage = serverAuth\n"
            "[client]\nextendedKeyUsage = clientAuth\n"
        )
        return cls(directory, cert, key)

    def issue(self, name: str, *, client: bool, lifetime: timedelta = timedelta(days=1)) -> Issued:
        """A certificate for CN=`name` (a server's for 127.0.0.1, or a client's), valid from a minute ago
        for `lifetime` from now."""
        stem = self.directory / f"{name}-{datetime.now(UTC).strftime('%H%M%S%f')}"
        key, csr, cert = stem.with_suffix(".key"), stem.with_suffix(".csr"), stem.with_suffix(".crt")
        _openssl("req", "-new", *_KEY, "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={name}")
        now = datetime.now(UTC)
        start, end = (moment.strftime("%Y%m%d%H%M%SZ") for moment in (now - timedelta(minutes=1), now + lifetime))
        _openssl(
            *("ca", "-batch", "-notext", "-config", str(self.directory / "ca.cnf"), "-in", str(csr)),
            *("-out", str(cert), "-startdate", start, "-enddate", end, "-extensions", "client" if client else "server"),
        )
        return Issued(cert, key)
