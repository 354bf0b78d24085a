#!/usr/bin/env bash
# Make a test certificate authority and certificates for TLS listeners (and mutual TLS),
# with openssl. Test use only: the keys are unencrypted or use the password below.
#
# Usage: scripts/make-certs.sh DIR [NAME...]
#   DNS names (or IPv4 addresses) of the broker certificate: localhost plus any given.
#   librdkafka (since 2.0) checks the broker's host name and does not accept IP
#   addresses, so clients and advertised.listeners must use one of the DNS names.
#
# Writes into DIR (kept if DIR/ca.pem exists already; remove DIR to start over):
#   ca.pem                 the CA certificate (ssl.truststore.location, ssl.ca.location)
#   truststore.p12         the CA as PKCS12 (ssl.truststore.type=PKCS12)
#   broker.pem             broker key (PKCS#8) + certificate (ssl.keystore.type=PEM)
#   broker-encrypted.pem   the same, key encrypted with ssl.key.password=$password
#   broker.p12             the same as PKCS12, ssl.keystore.password=$password
#   client.key, client.pem a client certificate (CN=client,OU=test,O=gregor): mutual TLS
#   other-client.key/.pem  one from a CA the broker does not trust
#   broker.key, broker-cert.pem  the broker key (PKCS#8) and certificate apart
set -euo pipefail
dir=${1:?usage: make-certs.sh DIR [DNS_NAME...]}
shift
password=gregor-secret
mkdir -p "$dir"
cd "$dir"
[ -e ca.pem ] && exit 0

days=3650
san="DNS:localhost"
for name in "$@"; do
  # An IPv4 address is named as one (Python's ssl checks it; librdkafka ignores it).
  if [[ $name =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ ]]; then san="$san,IP:$name"
  else san="$san,DNS:$name"; fi
done

ca() {  # name subject
  openssl req -x509 -newkey rsa:2048 -nodes -days "$days" -keyout "$1.key" -out "$1.pem" \
    -subj "$2" -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
}
leaf() {  # name subject ca extensions...
  local name=$1 subject=$2 issuer=$3
  shift 3
  openssl req -newkey rsa:2048 -nodes -keyout "$name.key" -out "$name.csr" -subj "$subject" \
    2>/dev/null
  printf '%s\n' "$@" > "$name.ext"
  openssl x509 -req -in "$name.csr" -CA "$issuer.pem" -CAkey "$issuer.key" -CAcreateserial \
    -days "$days" -out "$name.pem" -extfile "$name.ext" 2>/dev/null
  rm -f "$name.csr" "$name.ext"
}

ca ca "/CN=gregor test CA/O=gregor"
ca other-ca "/CN=untrusted test CA/O=elsewhere"
leaf broker-cert "/CN=localhost/O=gregor" ca "subjectAltName=$san" \
  "extendedKeyUsage=serverAuth,clientAuth"
leaf client "/C=US/O=gregor/OU=test/CN=client" ca "extendedKeyUsage=clientAuth"
leaf other-client "/CN=intruder/O=elsewhere" other-ca "extendedKeyUsage=clientAuth"

# Kafka's PEM key store: the private key as PKCS#8, then the certificate chain.
openssl pkcs8 -topk8 -nocrypt -in broker-cert.key -out broker.key
cat broker.key broker-cert.pem > broker.pem
openssl pkcs8 -topk8 -in broker-cert.key -passout "pass:$password" -v2 aes-256-cbc \
  -out broker-encrypted.key
cat broker-encrypted.key broker-cert.pem > broker-encrypted.pem
openssl pkcs12 -export -in broker-cert.pem -inkey broker-cert.key -certfile ca.pem \
  -name broker -passout "pass:$password" -out broker.p12
openssl pkcs12 -export -nokeys -in ca.pem -passout "pass:$password" -out truststore.p12
rm -f broker-cert.key broker-encrypted.key ca.srl other-ca.srl other-ca.key
chmod 600 ./*.key ./*.p12 broker.pem broker-encrypted.pem
