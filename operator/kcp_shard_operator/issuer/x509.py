"""Keys and certificates with PyCA cryptography: what :mod:`kcp_shard_operator.core.shard.pki`
decided to issue, signed here (ECDSA P-256 keys, SHA-256 signatures)."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.types import CertificatePublicKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kcp_shard_operator.core.pki.issuance import Purpose, Request

CLOCK_SKEW = datetime.timedelta(minutes=5)
"""Certificates are valid from a little before now, for clocks a little behind."""
MINIMUM_RSA_BITS = 3072


class CAError(Exception):
    """A user's CA that cannot sign: why, in one line."""


@dataclass(frozen=True)
class CA:
    certificate: x509.Certificate
    key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey

    @property
    def certificate_pem(self) -> str:
        return self.certificate.public_bytes(serialization.Encoding.PEM).decode()


@dataclass(frozen=True)
class Issued:
    certificate_pem: str
    key_pem: str
    not_after: datetime.datetime


def _key_pem(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


def new_key() -> str:
    """A new ECDSA P-256 private key: kcp signs service-account tokens with it (ES256) and
    verifies them with its public half. PEM ``EC PRIVATE KEY`` (SEC 1), not PKCS#8: the
    reader of ``--service-account-key-file`` (client-go's keyutil) takes ECDSA private keys
    only in that form ("data does not contain any valid RSA or ECDSA public keys")."""
    key = ec.generate_private_key(ec.SECP256R1())
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    ).decode()


def _name(common_name: str, organizations: tuple[str, ...] = ()) -> x509.Name:
    """CN and one O attribute per group (kcp reads every O as a group)."""
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    return x509.Name([*attributes, x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _key_usage(*, signs: bool) -> x509.KeyUsage:
    """Digital signatures (ECDSA TLS), and for a CA certificate and CRL signing too."""
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=signs,
        crl_sign=signs,
        encipher_only=False,
        decipher_only=False,
    )


def new_ca(request: Request, now: datetime.datetime) -> tuple[CA, Issued]:
    """A self-signed CA for ``request`` (purpose CA)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = _name(request.common_name)
    not_after = now + datetime.timedelta(seconds=request.lifetime_seconds)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(signs=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    ca = CA(certificate, key)
    return ca, Issued(ca.certificate_pem, _key_pem(key), certificate.not_valid_after_utc)


def sign(ca: CA, request: Request, now: datetime.datetime) -> Issued:
    """A new key and a certificate for ``request`` (serving or client), signed by ``ca``;
    never valid beyond the CA."""
    key = ec.generate_private_key(ec.SECP256R1())
    not_after = min(
        now + datetime.timedelta(seconds=request.lifetime_seconds),
        ca.certificate.not_valid_after_utc,
    )
    serving = request.purpose is Purpose.SERVING
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(request.common_name, request.organizations))
        .issuer_name(ca.certificate.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(signs=False), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH if serving else ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()),
            critical=False,
        )
    )
    if serving:
        names: list[x509.GeneralName] = [x509.DNSName(host) for host in request.dns_names]
        names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in request.ip_addresses]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    certificate = builder.sign(ca.key, hashes.SHA256())
    pem = certificate.public_bytes(serialization.Encoding.PEM).decode()
    return Issued(pem, _key_pem(key), certificate.not_valid_after_utc)


def _public(key: CertificatePublicKeyTypes) -> bytes:
    return key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def load_ca(
    secret: str, certificate_pem: bytes | None, key_pem: bytes | None, now: datetime.datetime
) -> CA:
    """The CA in ``secret``'s ``tls.crt`` and ``tls.key``; :class:`CAError` when it cannot
    sign (a key missing, not a CA, expired, a key that does not match, a weak key)."""
    if certificate_pem is None or key_pem is None:
        missing = " and ".join(
            key
            for key, value in (("tls.crt", certificate_pem), ("tls.key", key_pem))
            if value is None
        )
        raise CAError(f"Secret {secret} has no {missing}")
    try:
        certificate = x509.load_pem_x509_certificate(certificate_pem)
    except ValueError as err:
        raise CAError(f"tls.crt of Secret {secret} is not a PEM certificate") from err
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError) as err:
        raise CAError(f"tls.key of Secret {secret} is not an unencrypted PEM private key") from err
    try:
        constraints = certificate.extensions.get_extension_for_class(x509.BasicConstraints).value
    except x509.ExtensionNotFound:
        constraints = None
    if constraints is None or not constraints.ca:
        raise CAError(f"the certificate in Secret {secret} is not a CA (basicConstraints CA:TRUE)")
    not_after = certificate.not_valid_after_utc
    if now >= not_after:
        raise CAError(f"the CA in Secret {secret} expired at {not_after:%Y-%m-%dT%H:%M:%SZ}")
    if isinstance(key, rsa.RSAPrivateKey):
        if key.key_size < MINIMUM_RSA_BITS:
            raise CAError(
                f"the key in Secret {secret} is RSA {key.key_size}: at least "
                f"{MINIMUM_RSA_BITS} bits"
            )
    elif not isinstance(key, ec.EllipticCurvePrivateKey):
        raise CAError(f"the key in Secret {secret} is neither ECDSA nor RSA")
    if _public(key.public_key()) != _public(certificate.public_key()):
        raise CAError(f"tls.key of Secret {secret} is not the key of its tls.crt")
    return CA(certificate, key)
