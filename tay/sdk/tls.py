"""TLS client contexts for ``TayHTTP``: PEM files or a PKCS#12 bundle (mTLS).

PKCS#12 needs the optional ``cryptography`` package (``pip install tay[http-pkcs12]``);
it is imported only when a bundle is actually used, so plain HTTP and PEM never need it.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from pathlib import Path
from typing import Any

from tay.errors import ValidationError


def client_context(
    *,
    ca_file: str | Path | None,
    cert_file: str | Path | None,
    key_file: str | Path | None,
    pkcs12_file: str | Path | None,
    pkcs12_password: str | bytes | None,
) -> ssl.SSLContext:
    """A verifying client context; loads the client certificate when one is given."""
    if pkcs12_file is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # trusts only the bundle's CA
        _load_pkcs12(context, pkcs12_file, pkcs12_password)
        return context
    context = ssl.create_default_context(cafile=os.fspath(ca_file) if ca_file is not None else None)
    if cert_file is not None and key_file is not None:
        try:
            context.load_cert_chain(os.fspath(cert_file), os.fspath(key_file))
        except (OSError, ssl.SSLError) as exc:
            raise ValidationError(f"cannot load client certificate {cert_file!s} / key {key_file!s}: {exc}") from exc
    return context


def _cryptography() -> Any:
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.serialization import pkcs12
    except ModuleNotFoundError as exc:
        raise RuntimeError("PKCS#12 credentials need the cryptography package: pip install 'tay[http-pkcs12]'") from exc
    return x509, serialization, pkcs12


def _load_pkcs12(context: ssl.SSLContext, bundle_file: str | Path, password: str | bytes | None) -> None:
    x509, serialization, pkcs12 = _cryptography()
    if password is not None and not isinstance(password, (str, bytes)):
        raise ValidationError("tls_pkcs12_password must be a string or bytes")
    secret = password.encode() if isinstance(password, str) else password
    try:
        key, certificate, extra = pkcs12.load_key_and_certificates(Path(bundle_file).read_bytes(), secret)
    except OSError as exc:
        raise ValidationError(f"cannot read PKCS#12 bundle {bundle_file!s}: {exc}") from exc
    except Exception as exc:  # noqa: BLE001 - cryptography raises several types for bad bundles
        raise ValidationError(f"{bundle_file!s} is not a valid PKCS#12 bundle, or the password is wrong") from exc
    if key is None or certificate is None:
        raise ValidationError(f"PKCS#12 bundle {bundle_file!s} must hold a client key and certificate")
    authorities = [cert for cert in extra or [] if _is_ca(cert, x509)]
    if not authorities:
        raise ValidationError(f"PKCS#12 bundle {bundle_file!s} must include the CA certificate that signed the server")
    pem = serialization.Encoding.PEM
    context.load_verify_locations(cadata="".join(cert.public_bytes(pem).decode() for cert in authorities))
    # ssl can only load a client key from files: write them to a private directory briefly.
    with tempfile.TemporaryDirectory(prefix="tay-tls-") as directory:
        key_path, cert_path = Path(directory, "client.key"), Path(directory, "client.pem")
        key_bytes = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        for path, data in ((key_path, key_bytes), (cert_path, certificate.public_bytes(pem))):
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(data)
        context.load_cert_chain(str(cert_path), str(key_path))


def _is_ca(certificate: Any, x509: Any) -> bool:
    try:
        return bool(certificate.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
    except x509.ExtensionNotFound:
        return False
