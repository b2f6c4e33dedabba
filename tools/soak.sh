#!/usr/bin/env bash
# A soak: 16 honest scripted players (headless, over UDP) against the shooter's dedicated
# server for a long match, a player leaving and another joining (or rejoining) every 20 s.
# Prints the server's status for the first and the last period (memory, frame cost, entities)
# and checks that nothing is left behind once everyone has left (tools/against-server.sh).
#
#   tools/soak.sh [SECONDS]       default 1800 (CI runs 120)
set -euo pipefail
seconds=${1:-1800}
stats=60
if [ "$seconds" -lt 600 ]; then stats=20; fi
exec "$(dirname "$0")/against-server.sh" "$seconds" "$stats" --clients 16 --churn 20 --fps 30
