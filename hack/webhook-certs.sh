#!/usr/bin/env bash
# Make the TLS material of berth-operator's pods/eviction webhook with openssl (kopf's own
# self-signed generator is not used: it does not work with this OpenSSL).
#
#   hack/webhook-certs.sh DIR [SAN ...]
#
# Writes DIR/ca.crt, DIR/ca.key (a throw-away CA), DIR/tls.crt and DIR/tls.key (the server
# certificate signed by that CA). SANs: each argument is an IP address (IP:...) or a DNS name
# (DNS:...); default IP:127.0.0.1 and DNS:localhost. The operator reads DIR through
# BERTH_WEBHOOK_CERT_DIR; ca.crt becomes the caBundle of the ValidatingWebhookConfiguration.
# Idempotent: an existing DIR/tls.crt is kept. Certificates are valid for 365 days (EC P-256).
set -euo pipefail

dir=${1:?usage: hack/webhook-certs.sh DIR [SAN ...]}
shift
sans=("$@")
[ ${#sans[@]} -gt 0 ] || sans=(IP:127.0.0.1 DNS:localhost)
mkdir -p "$dir"
if [ -s "$dir/tls.crt" ] && [ -s "$dir/tls.key" ] && [ -s "$dir/ca.crt" ]; then
  exit 0
fi
umask 077
san_list=$(IFS=,; echo "${sans[*]}")
cn=${sans[0]#*:}

openssl ecparam -name prime256v1 -genkey -noout -out "$dir/ca.key"
openssl req -x509 -new -key "$dir/ca.key" -sha256 -days 365 \
  -subj "/CN=berth-webhook-ca" \
  -addext "basicConstraints=critical,CA:TRUE" \
  -addext "keyUsage=critical,keyCertSign,cRLSign" \
  -out "$dir/ca.crt" 2>/dev/null

openssl ecparam -name prime256v1 -genkey -noout -out "$dir/tls.key"
openssl req -new -key "$dir/tls.key" -subj "/CN=$cn" -out "$dir/tls.csr" 2>/dev/null
ext=$(mktemp)
trap 'rm -f "$ext" "$dir/tls.csr" "$dir/ca.srl"' EXIT
cat >"$ext" <<EXT
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=$san_list
EXT
openssl x509 -req -in "$dir/tls.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial \
  -sha256 -days 365 -extfile "$ext" -out "$dir/tls.crt" 2>/dev/null
chmod 0644 "$dir/ca.crt" "$dir/tls.crt"
