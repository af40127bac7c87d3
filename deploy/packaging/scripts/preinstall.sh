#!/bin/sh
# Creates the relay system user and group before the files are unpacked.
# Runs on install and upgrade (deb: $1 is install or upgrade; rpm: 1 or 2).
set -e
if ! getent group relay >/dev/null; then
	groupadd --system relay
fi
if ! getent passwd relay >/dev/null; then
	useradd --system --gid relay --home-dir /var/lib/relay --no-create-home \
		--shell /usr/sbin/nologin --comment "relay service" relay
fi
