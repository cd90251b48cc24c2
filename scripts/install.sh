#!/usr/bin/env bash
# Installs the programs and the relay's systemd units, and starts the relay's socket.
#
#   scripts/install.sh --user     the programs in ~/.local/bin, the units in
#                                 ~/.config/systemd/user; the relay runs as you
#   scripts/install.sh --system   (as root) the programs in /usr/local/bin, the units in
#                                 /etc/systemd/system; the relay runs as a user of its own
#
# Options: --no-start   install, but leave systemd alone (no daemon-reload, no enable)
#          --prefix DIR where the programs go (default: ~/.local or /usr/local)
# PERMISSION_BIN_DIR names built programs to install instead of building them.
set -euo pipefail
caller="$PWD"  # relative paths given are the caller's
cd "$(dirname "$0")/.."
absolute() { case "$1" in /*) echo "$1" ;; *) echo "$caller/$1" ;; esac; }

mode="" start=1 prefix=""
while [ $# -gt 0 ]; do
    case "$1" in
        --user|--system) mode="${1#--}" ;;
        --no-start) start=0 ;;
        --prefix)
            case "${2:-}" in ""|-*) echo "install.sh: --prefix needs a directory (see scripts/install.sh --help)" >&2; exit 64 ;; esac
            prefix="$(absolute "$2")"; shift ;;
        -h|--help) sed -n '2,11p' scripts/install.sh | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "install.sh: unknown option $1 (see scripts/install.sh --help)" >&2; exit 64 ;;
    esac
    shift
done
[ -n "$mode" ] || { echo "install.sh: say --user or --system (see scripts/install.sh --help)" >&2; exit 64; }

if [ "$mode" = system ]; then
    [ "$(id -u)" = 0 ] || { echo "install.sh: --system installs for the whole machine: run it as root" >&2; exit 1; }
    prefix="${prefix:-/usr/local}"
    units=/etc/systemd/system
    systemctl=(systemctl)
else
    prefix="${prefix:-$HOME/.local}"
    units="${XDG_CONFIG_HOME:-$HOME/.config}/systemd/user"
    systemctl=(systemctl --user)
fi

bin="${PERMISSION_BIN_DIR:+$(absolute "$PERMISSION_BIN_DIR")}"
if [ -z "$bin" ]; then
    # The Swift runtime linked in: the installed programs must not depend on where the
    # toolchain is (a system service may not read a home directory).
    echo "building the release programs (swift build -c release --static-swift-stdlib)…"
    swift build -c release --static-swift-stdlib
    bin="$(swift build -c release --static-swift-stdlib --show-bin-path)"
fi

for p in permission-relay permission-child permission-guardian; do
    [ -x "$bin/$p" ] || { echo "install.sh: $bin/$p is not there: build the programs, or give PERMISSION_BIN_DIR where they are" >&2; exit 1; }
done
install -d -m 0755 "$prefix/bin" "$units"
for p in permission-relay permission-child permission-guardian; do
    install -m 0755 "$bin/$p" "$prefix/bin/$p"
done
for u in permission-relay.socket permission-relay.service; do
    sed "s|@BINDIR@|$prefix/bin|g" "scripts/systemd/$mode/$u" > "$units/$u.tmp"
    chmod 0644 "$units/$u.tmp"
    mv "$units/$u.tmp" "$units/$u"
done
echo "installed the programs in $prefix/bin and the units in $units"

if [ "$start" = 0 ]; then
    echo "to start: ${systemctl[*]} daemon-reload && ${systemctl[*]} enable --now permission-relay.socket"
    exit 0
fi
if ! "${systemctl[@]}" daemon-reload; then
    echo "install.sh: systemd is not running for this $mode (${systemctl[*]} failed): the programs and units are installed;" \
        "start the relay by hand (permission-relay serve), or install with --no-start where there is no systemd" >&2
    exit 1
fi
"${systemctl[@]}" enable --now permission-relay.socket
if [ "$mode" = system ]; then
    echo "the relay listens on /run/permission-relay/relay.sock; administer it as root (permission-relay family create …)"
else
    echo "the relay listens on ${XDG_RUNTIME_DIR:-/run/user/$(id -u)}/permission-relay/relay.sock and starts with the first app"
fi
if [ "$mode" = system ]; then echo "logs: journalctl -u permission-relay"; else echo "logs: journalctl --user -u permission-relay"; fi
