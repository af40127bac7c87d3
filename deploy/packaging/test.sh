#!/usr/bin/env bash
# 'make dist-test': checks what 'make dist' built in dist/. Installs the .deb
# for this machine with dpkg (as root), checks the files, the relay user, the
# data directory's owner, the systemd unit (systemd-analyze verify and
# security), runs the installed binary as the relay user, then purges the
# package. Checks an archive's contents and SHA256SUMS. Exits non-zero at the
# first check that fails, saying which.
set -euo pipefail
cd "$(dirname "$0")/../.."

fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { echo "ok: $*"; }

[ "$(id -u)" = 0 ] || fail "run as root: the test installs a .deb with dpkg"
command -v dpkg >/dev/null || fail "dpkg is missing: this test needs a Debian-based machine"
if ! command -v systemd-analyze >/dev/null; then
	echo "installing systemd (Debian) for systemd-analyze"
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq systemd >/dev/null
fi
if dpkg-query -W -f '${Status}' relay 2>/dev/null | grep -q 'install ok'; then
	fail "a relay package is installed already: this test would purge it (dpkg --purge relay first)"
fi

arch=$(dpkg --print-architecture)
archive=$(ls dist/relay_*_linux_"$arch".tar.gz 2>/dev/null | head -1)
[ -n "$archive" ] || fail "no dist/relay_*_linux_$arch.tar.gz: run make dist"
version=$(basename "$archive" .tar.gz | sed -E "s/^relay_(.*)_linux_$arch\$/\\1/")
deb=$(ls dist/relay_*_"$arch".deb 2>/dev/null | head -1)
[ -n "$deb" ] || fail "no dist/relay_*_$arch.deb"
echo "relay $version: $archive, $deb"

# The checksums, then the archive's contents and its binary.
(cd dist && sha256sum --quiet -c SHA256SUMS) || fail "dist/SHA256SUMS does not verify"
for f in dist/*.tar.gz dist/*.deb dist/*.rpm; do
	grep -q " $(basename "$f")\$" dist/SHA256SUMS || fail "$f is not in SHA256SUMS"
done
ok "SHA256SUMS verifies and lists every artifact ($(wc -l < dist/SHA256SUMS) files)"
for os in linux darwin; do for a in amd64 arm64; do
	[ -f "dist/relay_${version}_${os}_${a}.tar.gz" ] || fail "no archive for $os/$a"
done; done
want=$(printf 'relay_%s_linux_%s/\nrelay_%s_linux_%s/LICENSE\nrelay_%s_linux_%s/README.md\nrelay_%s_linux_%s/relay\n' "$version" "$arch" "$version" "$arch" "$version" "$arch" "$version" "$arch")
got=$(tar -tzf "$archive")
[ "$got" = "$want" ] || fail "$archive holds:
$got
want:
$want"
tmp=$(mktemp -d)
tar -xzf "$archive" -C "$tmp"
first=$("$tmp/relay_${version}_linux_$arch/relay" version | head -1)
[ "$first" = "relay version $version" ] || fail "the archive's relay says '$first', want 'relay version $version'"
rm -rf "$tmp"
ok "$archive holds relay, LICENSE and README.md; its relay says '$first'"

# Install. Clean up what the install made, leaving what was there before.
had_user=no
getent passwd relay >/dev/null && had_user=yes
had_dir=no
[ -e /var/lib/relay ] && had_dir=yes
relay_pid=
cleanup() {
	[ -n "$relay_pid" ] && kill "$relay_pid" 2>/dev/null && wait "$relay_pid" 2>/dev/null
	dpkg --purge relay >/dev/null 2>&1 || true
	[ "$had_user" = no ] && userdel relay 2>/dev/null
	[ "$had_dir" = no ] && rm -rf /var/lib/relay
	true
}
trap cleanup EXIT
dpkg -i "$deb"

# Files.
for f in /usr/bin/relay /usr/lib/systemd/system/relay.service /etc/relay/relay.env /usr/share/doc/relay/copyright; do
	dpkg -L relay | grep -qx "$f" || fail "dpkg -L relay does not list $f"
	[ -f "$f" ] || fail "$f was not installed"
done
[ "$(stat -c '%a %U' /usr/bin/relay)" = "755 root" ] || fail "/usr/bin/relay is $(stat -c '%a %U' /usr/bin/relay), want 755 root"
[ "$(stat -c '%a %U' /etc/relay/relay.env)" = "600 root" ] || fail "/etc/relay/relay.env is $(stat -c '%a %U' /etc/relay/relay.env), want 600 root (it holds the secret key)"
dpkg-query -W -f '${Conffiles}' relay | grep -q /etc/relay/relay.env || fail "/etc/relay/relay.env is not a conffile: an upgrade would overwrite it"
grep -q 'Apache License' /usr/share/doc/relay/copyright || fail "/usr/share/doc/relay/copyright is not the license"
ok "files: /usr/bin/relay 755, relay.service, /etc/relay/relay.env 600 root (a conffile)"

# The user and the data directory.
IFS=: read -r _ _ uid gid _ home shell < <(getent passwd relay) || fail "no relay user"
[ "$uid" -lt 1000 ] || fail "relay's uid $uid is not a system uid"
[ "$home" = /var/lib/relay ] || fail "relay's home is $home"
case "$shell" in */nologin) ;; *) fail "relay's shell is $shell, want nologin" ;; esac
[ "$(getent group relay | cut -d: -f3)" = "$gid" ] || fail "relay's group is not relay"
[ "$(stat -c '%U:%G %a' /var/lib/relay)" = "relay:relay 750" ] || fail "/var/lib/relay is $(stat -c '%U:%G %a' /var/lib/relay), want relay:relay 750"
ok "user relay (system uid $uid, nologin); /var/lib/relay relay:relay 750"

# The unit: verify (syntax, the binary, the user), then the hardening.
unit=/usr/lib/systemd/system/relay.service
verify=$(systemd-analyze verify "$unit" 2>&1) || fail "systemd-analyze verify $unit: $verify"
[ -z "$verify" ] || fail "systemd-analyze verify $unit warns: $verify"
ok "systemd-analyze verify $unit: no warnings (systemd is $( [ -d /run/systemd/system ] && echo PID 1 || echo not PID 1) here)"
sec=$(systemd-analyze security --offline=true "$unit" 2>&1) || fail "systemd-analyze security: $sec"
exposure=$(echo "$sec" | sed -nE 's/.*Overall exposure level for relay.service: ([0-9.]+).*/\1/p')
[ -n "$exposure" ] || fail "no exposure level in: $sec"
awk -v e="$exposure" 'BEGIN { exit !(e <= 2.0) }' || fail "relay.service's exposure is $exposure, want at most 2.0 (systemd-analyze security --offline=true $unit)"
for d in 'User=relay' 'StateDirectory=relay' 'ProtectSystem=strict' 'ProtectHome=yes' 'PrivateTmp=yes' \
	'NoNewPrivileges=yes' 'CapabilityBoundingSet=' 'Restart=on-failure' 'EnvironmentFile=/etc/relay/relay.env' \
	'ExecStart=/usr/bin/relay run --data-dir /var/lib/relay'; do
	grep -qx "$d" "$unit" || fail "$unit lacks $d"
done
ok "systemd-analyze security: exposure $exposure (at most 2.0)"

# The installed binary: its version, then 'relay run' as the relay user on
# the data directory, until /readyz answers.
first=$(/usr/bin/relay version | head -1)
[ "$first" = "relay version $version" ] || fail "/usr/bin/relay says '$first', want 'relay version $version'"
/usr/bin/relay version | grep -q '^commit: [0-9a-f]\{40\}' || fail "/usr/bin/relay version names no commit: $(/usr/bin/relay version)"
ok "/usr/bin/relay version: $first"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
log=$(mktemp)
# setpriv execs relay (runuser would stay in between and answer SIGTERM itself).
setpriv --reuid relay --regid relay --init-groups /usr/bin/relay run --data-dir /var/lib/relay --listen 127.0.0.1:0 --metrics-addr "127.0.0.1:$port" >"$log" 2>&1 &
relay_pid=$!
deadline=$((SECONDS + 60))
until curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1; do
	kill -0 "$relay_pid" 2>/dev/null || fail "relay run exited: $(cat "$log")"
	[ $SECONDS -lt $deadline ] || fail "relay run not ready within 60s: $(cat "$log")"
	sleep 0.2
done
[ -n "$(find /var/lib/relay -mindepth 1 -user relay | head -1)" ] || fail "relay wrote nothing owned by relay in /var/lib/relay"
kill -TERM "$relay_pid"
wait "$relay_pid" || fail "relay run exited $? on SIGTERM: $(cat "$log")"
relay_pid=
rm -f "$log"
ok "relay run as the relay user on /var/lib/relay: /readyz answered, stopped cleanly on SIGTERM"

dpkg --purge relay >/dev/null
[ ! -e /usr/bin/relay ] && [ ! -e "$unit" ] && [ ! -e /etc/relay/relay.env ] || fail "dpkg --purge left relay's files"
ok "dpkg --purge relay removed the binary, the unit and the environment file"
echo "PASS"
