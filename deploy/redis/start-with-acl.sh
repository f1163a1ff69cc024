#!/bin/sh
# Start redis-server with the ACL users of users.acl.template (the compose `secure`
# profile; docs/security.md, "The secure profile"). The passwords come from this process's
# environment and are written only to a mode-600 file on a tmpfs: they never reach another
# container. Passwords are letters and digits only (`openssl rand -hex 32`): anything else
# could add ACL rules to the line it is written into. Extra arguments go to redis-server.
# REDIS_ACL_RENDER_ONLY=1: write the file (REDIS_ACL_FILE) and stop, e.g. for a Kubernetes
# Secret (docs/operations.md, "Kubernetes, securely").
set -eu
template=${REDIS_ACL_TEMPLATE:-/etc/redis/users.acl.template}
out=${REDIS_ACL_FILE:-/run/redis/users.acl}
prefix=${ONLINEPREDICT_KEY_PREFIX:-onlinepredict:}
for var in STACK_REDIS_API_PASSWORD STACK_REDIS_WORKER_PASSWORD STACK_REDIS_EXPORTER_PASSWORD; do
  eval "value=\${$var:-}"
  case "$value" in
    "" | *[!A-Za-z0-9]*)
      echo "$var must be set to letters and digits only (openssl rand -hex 32)" >&2
      exit 2 ;;
  esac
  if [ "${#value}" -lt 32 ]; then
    echo "$var is shorter than 32 characters (openssl rand -hex 32)" >&2
    exit 2
  fi
done
case "$prefix" in
  "" | *[!A-Za-z0-9:._-]*)
    echo "ONLINEPREDICT_KEY_PREFIX may hold only letters, digits and : . _ -" >&2
    exit 2 ;;
esac
umask 077
mkdir -p "$(dirname "$out")"
# an ACL file has no comments: they are the template's only
sed -e '/^#/d' -e '/^[[:space:]]*$/d' \
    -e "s/@STACK_REDIS_API_PASSWORD@/$STACK_REDIS_API_PASSWORD/g" \
    -e "s/@STACK_REDIS_WORKER_PASSWORD@/$STACK_REDIS_WORKER_PASSWORD/g" \
    -e "s/@STACK_REDIS_EXPORTER_PASSWORD@/$STACK_REDIS_EXPORTER_PASSWORD/g" \
    -e "s/@KEY_PREFIX@/$prefix/g" \
    "$template" > "$out"
if [ "${REDIS_ACL_RENDER_ONLY:-0}" = 1 ]; then
  exit 0
fi
unset STACK_REDIS_API_PASSWORD STACK_REDIS_WORKER_PASSWORD STACK_REDIS_EXPORTER_PASSWORD
exec "${REDIS_SERVER:-redis-server}" "$@" --aclfile "$out"
