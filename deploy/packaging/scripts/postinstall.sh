#!/bin/sh
# Creates relay's data directory, owned by the relay user, and tells systemd
# about the unit. The service is neither enabled nor started: set
# RELAY_SECRET_KEY in /etc/relay/relay.env first.
set -e
install -d -o relay -g relay -m 0750 /var/lib/relay
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
fi
