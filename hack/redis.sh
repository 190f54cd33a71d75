#!/usr/bin/env bash
# The dev cluster's Redis (Debian's redis-server on the host), as a managed Redis is reached:
# TLS only, with the chart's ACL users, and an append-only file (the front door's queued
# messages and BudgetPolicy spend survive a restart, as with the chart's bundled Redis).
#
#   hack/redis.sh up          start it, or reload its ACL file when it already runs (idempotent)
#   hack/redis.sh restart     stop it and start it again on the same port and data (tests)
#   hack/redis.sh url ROLE    print the rediss:// URL of ROLE (session, worker, operator, admin)
#
# State in the dev dir: redis-secrets/<role>-password (made once), redis/ (users.acl, the
# append-only file), redis-tls/ (a dev CA and the server certificate for $HOST_IP, 127.0.0.1
# and localhost, made once with openssl by hack/webhook-certs.sh), redis.port, redis.pid,
# redis.log. Clients verify the server with the CA: URLs carry ?ssl_ca_certs=<dev dir>/redis-tls/
# ca.crt (redis-py's parameter; the operator copies that file into the pods it gives the URL).
source "$(dirname "$0")/lib.sh"
LOG_TAG=redis
TLS_DIR=$DEV/redis-tls
CA=$TLS_DIR/ca.crt

redis_pw() { cat "$DEV/redis-secrets/$1-password"; }
cli() { # cli PORT ARGS...: redis-cli as the dev-only admin user, over TLS
  local port=$1; shift
  REDISCLI_AUTH=$(redis_pw admin) redis-cli --no-auth-warning --tls --cacert "$CA" \
    --user berth-admin -h 127.0.0.1 -p "$port" "$@"
}
redis_ping() { # up, over TLS, and enforcing the ACL users (not a password-less default)
  [[ $(cli "$1" acl whoami 2>/dev/null) == berth-admin ]]
}

# make_secrets: role passwords (charts/berth/files/redis rules) and the ACL file from them.
make_secrets() {
  mkdir -p "$DEV/redis" "$DEV/redis-secrets"
  chmod 700 "$DEV/redis-secrets"
  local role f
  for role in session worker operator admin; do
    f=$DEV/redis-secrets/$role-password
    [[ -s $f ]] || { head -c 18 /dev/urandom | base64 | tr '+/' '._' | tr -d '=\n' > "$f"; }
  done
  SECRETS_DIR=$DEV/redis-secrets TEMPLATE=$ROOT/charts/berth/files/redis/users.acl.tmpl \
    OUT=$DEV/redis/users.acl sh "$ROOT/charts/berth/files/redis/render-acl.sh"
  printf 'user berth-admin on #%s ~* &* +@all\n' \
    "$(printf '%s' "$(redis_pw admin)" | sha256sum | cut -d' ' -f1)" >> "$DEV/redis/users.acl"
  bash "$ROOT/hack/webhook-certs.sh" "$TLS_DIR" "IP:$HOST_IP" IP:127.0.0.1 DNS:localhost
}

start() { # start PORT
  redis-server --bind "127.0.0.1 $HOST_IP" --port 0 --tls-port "$1" \
    --tls-cert-file "$TLS_DIR/tls.crt" --tls-key-file "$TLS_DIR/tls.key" \
    --tls-ca-cert-file "$CA" --tls-auth-clients no \
    --dir "$DEV/redis" --save "" --appendonly yes --appendfsync everysec \
    --aclfile "$DEV/redis/users.acl" \
    --daemonize yes --pidfile "$DEV/redis.pid" --logfile "$DEV/redis.log"
  for _ in $(seq 50); do redis_ping "$1" && break; sleep 0.1; done
  redis_ping "$1" || die "redis did not start; see $DEV/redis.log"
}

up() {
  make_secrets
  local port
  if pid_alive "$DEV/redis.pid" && [[ -f $DEV/redis.port ]] && redis_ping "$(cat "$DEV/redis.port")"; then
    cli "$(cat "$DEV/redis.port")" acl load >/dev/null
    log "redis already up (TLS) on 127.0.0.1 and $HOST_IP, port $(cat "$DEV/redis.port") (ACL reloaded)"
    return
  fi
  # Not running, or running without TLS (an older dev cluster): (re)start it on its port.
  stop_pidfile "$DEV/redis.pid" 5
  [[ -s $DEV/redis.port ]] || free_port > "$DEV/redis.port"
  port=$(cat "$DEV/redis.port")
  start "$port"
  log "redis up (TLS only, appendonly) on 127.0.0.1 and $HOST_IP, port $port (ACL users: berth-session, berth-worker, berth-operator, berth-admin)"
}

case ${1:-} in
  up) up ;;
  restart)
    port=$(cat "$DEV/redis.port")
    stop_pidfile "$DEV/redis.pid" 10  # SIGTERM: Redis flushes the append-only file, then exits
    start "$port"
    log "redis restarted on port $port" ;;
  url)
    role=${2:?usage: hack/redis.sh url ROLE}
    echo "rediss://berth-$role:$(redis_pw "$role")@$HOST_IP:$(cat "$DEV/redis.port")/0?ssl_ca_certs=$CA" ;;
  *) die "usage: hack/redis.sh up|restart|url ROLE" ;;
esac
