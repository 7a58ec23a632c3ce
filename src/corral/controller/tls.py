"""The controller's TCP endpoint: a self-signed certificate and its fingerprint.

Made once into $CORRAL_HOME/tls/ and kept: agents pin the certificate's SHA-256
fingerprint, so regenerating it would lock every joined machine out.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import socket
import ssl

from corral.auth import cert_path, fingerprint_of_pem


def tls_dir(home: str) -> str:
    return os.path.dirname(cert_path(home))


def key_path(home: str) -> str:
    return os.path.join(tls_dir(home), "key.pem")


def _write_private(path: str, data: bytes) -> None:
    """Write a secret readable by its owner only, atomically."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(tmp, 0o600)
    os.rename(tmp, path)


def public_url(host: str, port: int) -> str:
    """How other machines reach a listener on host:port (a wildcard: this machine's name)."""
    if host in ("", "0.0.0.0", "::"):
        host = socket.gethostname()
    if ":" in host:
        host = f"[{host}]"
    return f"https://{host}:{port}"


def ensure_certificate(home: str, host: str) -> tuple[str, str]:
    """(cert, key) paths; a self-signed EC certificate is generated on first use."""
    cert, key = cert_path(home), key_path(home)
    if os.path.exists(cert) and os.path.exists(key):
        return cert, key
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    os.makedirs(tls_dir(home), mode=0o700, exist_ok=True)
    os.chmod(tls_dir(home), 0o700)
    private = ec.generate_private_key(ec.SECP256R1())
    hostname = socket.gethostname()
    names: list[x509.GeneralName] = [x509.DNSName(hostname), x509.DNSName("localhost")]
    for h in {host, "127.0.0.1"}:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            if h:
                names.append(x509.DNSName(h))
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"corral controller {hostname}")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject).issuer_name(subject)
        .public_key(private.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        # pinned by fingerprint, not trusted through expiry: a long life avoids a lock-out
        .not_valid_after(now + datetime.timedelta(days=3650 * 3))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(private, hashes.SHA256())
    )
    _write_private(key, private.private_bytes(serialization.Encoding.PEM,
                                              serialization.PrivateFormat.PKCS8,
                                              serialization.NoEncryption()))
    with open(cert + ".tmp", "wb") as f:
        f.write(certificate.public_bytes(serialization.Encoding.PEM))
    os.rename(cert + ".tmp", cert)
    return cert, key


def certificate_fingerprint(home: str) -> str:
    with open(cert_path(home)) as f:
        return fingerprint_of_pem(f.read())


def server_context(cert: str, key: str) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)
    return ctx


def parse_listen(spec: str) -> tuple[str, int]:
    """HOST:PORT or [V6]:PORT → (host, port)."""
    host, sep, port = spec.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--listen expects HOST:PORT, got {spec!r}")
    return host.strip("[]") or "0.0.0.0", int(port)
