#!/bin/sh
# Run an agent command in a fresh Linux network namespace whose only way out is the
# gateway's forward proxy.
#
#   run-in-sandbox.sh --proxy-port 3128 [--subnet 10.200.0] [--auth ID:TOKEN] \
#                     [--user NAME] -- COMMAND [ARG...]
#
# The namespace gets one veth link to this host (SUBNET.2/30 inside, SUBNET.1/30 here), no
# default route and no resolver: the only reachable address is SUBNET.1, where the gateway's
# proxy must listen (bind it to SUBNET.1 or a wildcard; a non-loopback bind needs clients).
# HTTP_PROXY / HTTPS_PROXY (and the lower-case forms) point at it, with the client's
# credentials when --auth is given. The namespace and the link are removed on exit.
# Needs root (iproute2's `ip netns`). Use only private test addresses that nothing routes.
set -eu

usage() {
    sed -n '2,13p' "$0" >&2
    exit 2
}

PROXY_PORT=""
SUBNET="10.200.0"
AUTH="${GATEWAY_PROXY_AUTH:-}"
RUN_AS=""
while [ $# -gt 0 ]; do
    case "$1" in
        --proxy-port) PROXY_PORT="$2"; shift 2 ;;
        --subnet) SUBNET="$2"; shift 2 ;;
        --auth) AUTH="$2"; shift 2 ;;
        --user) RUN_AS="$2"; shift 2 ;;
        --) shift; break ;;
        -h|--help) usage ;;
        *) echo "run-in-sandbox: unknown option $1" >&2; usage ;;
    esac
done
[ -n "$PROXY_PORT" ] && [ $# -gt 0 ] || usage
case "$SUBNET" in
    10.*.*|192.168.*|172.1[6-9].*|172.2[0-9].*|172.3[01].*) ;;
    *) echo "run-in-sandbox: --subnet must be a private 10/8, 172.16/12 or 192.168/16 prefix" >&2; exit 2 ;;
esac
if [ "$(id -u)" != 0 ]; then
    echo "run-in-sandbox: needs root to create a network namespace" >&2
    exit 2
fi

ID=$$
NS="gwbox-$ID"
HOST_IF="gwh$ID"
NS_IF="gwn$ID"

cleanup() {
    ip netns del "$NS" 2>/dev/null || true
    ip link del "$HOST_IF" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip netns add "$NS"
ip link add "$HOST_IF" type veth peer name "$NS_IF"
ip link set "$NS_IF" netns "$NS"
ip addr add "$SUBNET.1/30" dev "$HOST_IF"
ip link set "$HOST_IF" up
ip -n "$NS" link set lo up
ip -n "$NS" addr add "$SUBNET.2/30" dev "$NS_IF"
ip -n "$NS" link set "$NS_IF" up
# No default route is added: anything but SUBNET.1 is unreachable from inside.

PROXY="http://$SUBNET.1:$PROXY_PORT"
if [ -n "$AUTH" ]; then
    PROXY="http://$AUTH@$SUBNET.1:$PROXY_PORT"
fi

set +e
if [ -n "$RUN_AS" ]; then
    # An unprivileged agent cannot add routes or addresses inside its namespace.
    ip netns exec "$NS" env HTTP_PROXY="$PROXY" HTTPS_PROXY="$PROXY" http_proxy="$PROXY" \
        https_proxy="$PROXY" NO_PROXY= no_proxy= \
        setpriv --reuid="$RUN_AS" --regid="$(id -g "$RUN_AS")" --clear-groups --no-new-privs \
        -- "$@"
else
    ip netns exec "$NS" env HTTP_PROXY="$PROXY" HTTPS_PROXY="$PROXY" http_proxy="$PROXY" \
        https_proxy="$PROXY" NO_PROXY= no_proxy= "$@"
fi
status=$?
set -e
exit "$status"
