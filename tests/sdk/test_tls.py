"""PKCS#12 client credentials: a bundle with key, certificate and CA loads; others are refused."""

import datetime

import pytest

from tay import TayHTTP
from tay.errors import ValidationError

# cryptography is in the dev extra (and the SDK's http-pkcs12 extra): a plain import, no skip.
from cryptography import x509  # noqa: E402
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.hazmat.primitives.serialization import pkcs12  # noqa: E402
from cryptography.x509.oid import NameOID  # noqa: E402


def certificate(subject, key, issuer=None, issuer_key=None, ca=False):
    now = datetime.datetime.now(datetime.timezone.utc)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    return (x509.CertificateBuilder().subject_name(name).issuer_name(issuer or name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
            .sign(issuer_key or key, hashes.SHA256()))


@pytest.fixture(scope="module")
def credentials():
    ca_key, client_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = certificate("test-ca", ca_key, ca=True)
    client = certificate("client", client_key, issuer=ca.subject, issuer_key=ca_key)
    return client_key, client, ca


def bundle(path, key, cert, cas, password=b"pw"):
    encryption = serialization.BestAvailableEncryption(password)
    path.write_bytes(pkcs12.serialize_key_and_certificates(b"client", key, cert, cas, encryption))
    return path


def test_bundle_with_ca_is_accepted(tmp_path, credentials):
    key, cert, ca = credentials
    tay = TayHTTP("https://tay.example:8443", tls_pkcs12_file=bundle(tmp_path / "ok.p12", key, cert, [ca]),
                  tls_pkcs12_password="pw")
    assert tay._context is not None and tay._context.verify_mode.name == "CERT_REQUIRED"


def test_bundle_without_ca_or_with_wrong_password_is_refused(tmp_path, credentials):
    key, cert, ca = credentials
    with pytest.raises(ValidationError, match="CA certificate"):
        TayHTTP("https://tay.example", tls_pkcs12_file=bundle(tmp_path / "noca.p12", key, cert, None),
                tls_pkcs12_password=b"pw")
    with pytest.raises(ValidationError, match="password is wrong"):
        TayHTTP("https://tay.example", tls_pkcs12_file=bundle(tmp_path / "pw.p12", key, cert, [ca]),
                tls_pkcs12_password="other")
