"""Test PKI with ``cryptography``: a CA, a server certificate for 127.0.0.1/localhost and
client certificates, written as PEM files."""

from __future__ import annotations

import datetime
import ipaddress
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


class Authority:
    def __init__(self, name: str) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        self.cert = (
            _builder(subject, subject, self.key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False,
                                         False), critical=True)
            .sign(self.key, hashes.SHA256())
        )

    def issue(self, name: str, *, server: bool) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (_builder(subject, self.cert.subject, key.public_key())
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False)
        return builder.sign(self.key, hashes.SHA256()), key

    def write(self, directory: Path, stem: str, *, server: bool) -> tuple[str, str]:
        cert, key = self.issue(stem, server=server)
        cert_path, key_path = directory / f"{stem}.crt", directory / f"{stem}.key"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                               serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
        return str(cert_path), str(key_path)

    def write_ca(self, directory: Path, stem: str) -> str:
        path = directory / f"{stem}.crt"
        path.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))
        return str(path)


def _builder(subject: x509.Name, issuer: x509.Name, public_key) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.timezone.utc)
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
            .public_key(public_key).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1)))


def make_pki(directory: Path) -> dict[str, str]:
    """CA + server + good client, and a client signed by an unrelated CA."""
    ca, rogue = Authority("tay test CA"), Authority("rogue CA")
    paths = {"ca": ca.write_ca(directory, "ca"), "rogue_ca": rogue.write_ca(directory, "rogue-ca")}
    paths["server_cert"], paths["server_key"] = ca.write(directory, "server", server=True)
    paths["client_cert"], paths["client_key"] = ca.write(directory, "client", server=False)
    paths["rogue_cert"], paths["rogue_key"] = rogue.write(directory, "rogue", server=False)
    return paths


@contextmanager
def scratch_pki(scratch: Path) -> Iterator[dict[str, str]]:
    """``make_pki`` in a fresh directory under ``scratch``, removed afterwards."""
    scratch.mkdir(exist_ok=True)
    directory = Path(tempfile.mkdtemp(prefix="pki-", dir=scratch))
    try:
        yield make_pki(directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
