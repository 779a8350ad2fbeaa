#!/bin/sh
# Makes the NATS certificates that kustomization.yaml turns into the Secret `nats-tls`: a private CA
# (ca.crt) and one key and certificate (tls.key, tls.crt) for the three servers, valid for every name
# clients and routes use. Servers present it on the client port (4222) and on cluster routes (6222),
# where they also demand it from the other side (verify): only a holder of a certificate from this CA
# can join as a route. cortex's pods trust ca.crt. Run from anywhere; writes k8s/config/nats-tls/.
#   sh k8s/config/nats-tls.sh [namespace] [days]
# With cert-manager, issue a Certificate into a Secret named nats-tls with the same names instead
# (docs/deployment.md shows one) and drop the nats-tls entry of secretGenerator.
set -eu
NS=${1:-cortex}
DAYS=${2:-825}
DIR=$(cd "$(dirname "$0")" && pwd)/nats-tls
mkdir -p "$DIR"
cd "$DIR"
SAN="DNS:nats,DNS:nats.$NS,DNS:nats.$NS.svc,DNS:nats.$NS.svc.cluster.local"
for i in 0 1 2; do
  for suffix in "" ".$NS" ".$NS.svc" ".$NS.svc.cluster.local"; do SAN="$SAN,DNS:nats-$i.nats-headless$suffix"; done
done
SAN="$SAN,DNS:*.nats-headless.$NS.svc.cluster.local"
openssl req -x509 -newkey rsa:3072 -nodes -days "$DAYS" -subj "/CN=cortex NATS CA" -keyout ca.key -out ca.crt 2>/dev/null
openssl req -newkey rsa:3072 -nodes -subj "/CN=nats" -keyout tls.key -out tls.csr 2>/dev/null
printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\nkeyUsage=digitalSignature,keyEncipherment\n' "$SAN" > ext.cnf
openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days "$DAYS" -extfile ext.cnf -out tls.crt 2>/dev/null
rm -f tls.csr ext.cnf ca.srl
# ca.key stays here (not in the Secret): keep it safe, or delete it and re-run this to rotate.
chmod 600 ca.key tls.key
echo "wrote $DIR/ca.crt, tls.crt, tls.key (and ca.key, which stays out of the cluster)"
