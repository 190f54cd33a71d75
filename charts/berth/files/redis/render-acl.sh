#!/bin/sh
# Render the Redis ACL file of the bundled Redis (run by its init container).
#
# Reads $SECRETS_DIR/{session,worker,operator}-password (the chart's or redis.auth.existingSecret's
# keys), checks each is 16+ characters of A-Z a-z 0-9 . _ ~ - (the passwords are put verbatim into
# redis:// URLs, so nothing there may need escaping; a trailing newline is refused too), and
# writes $OUT from $TEMPLATE with @SESSION@, @WORKER@, @OPERATOR@ replaced by the SHA-256 of the
# password (Redis "#<hash>" rules: no clear-text password on disk). Exit status 1 with a message
# naming the key on any problem; $OUT is then left untouched.
set -eu
: "${SECRETS_DIR:?}" "${TEMPLATE:?}" "${OUT:?}"
umask 077

digest() {
    file="$SECRETS_DIR/$1-password"
    if [ ! -r "$file" ]; then
        echo "render-acl: secret key $1-password is missing" >&2
        exit 1
    fi
    pw=$(cat "$file"; echo x)
    pw=${pw%x}
    case "$pw" in
        *[!A-Za-z0-9._~-]*)
            echo "render-acl: $1-password may only use A-Z a-z 0-9 . _ ~ - (it goes into a redis:// URL)" >&2
            exit 1 ;;
    esac
    if [ "${#pw}" -lt 16 ]; then
        echo "render-acl: $1-password must be at least 16 characters" >&2
        exit 1
    fi
    printf '%s' "$pw" | sha256sum | cut -d ' ' -f 1
}

session=$(digest session)
worker=$(digest worker)
operator=$(digest operator)
sed -e '/^#/d' -e '/^[[:space:]]*$/d' \
    -e "s/@SESSION@/$session/" -e "s/@WORKER@/$worker/" -e "s/@OPERATOR@/$operator/" \
    "$TEMPLATE" > "$OUT.tmp"
mv "$OUT.tmp" "$OUT"
