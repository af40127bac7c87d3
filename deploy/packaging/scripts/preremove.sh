#!/bin/sh
# Stops and disables relay.service when the package is removed (not on an
# upgrade: deb passes "upgrade", rpm 1).
set -e
case "$1" in
remove | 0)
	if [ -d /run/systemd/system ]; then
		systemctl stop relay.service || true
		systemctl disable relay.service || true
	fi
	;;
esac
