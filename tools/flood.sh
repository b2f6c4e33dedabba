#!/usr/bin/env bash
# A flood against the shooter's dedicated server (a real process over UDP on loopback), with
# three honest scripted players beside it: random, truncated and oversize datagrams,
# connection requests from thousands of 127.0.0.0/8 addresses, a client sending its moves,
# shots, reloads and delay reports at 100x the normal rate, one replaying and reordering its
# packets, one sending malformed packets under valid encryption (fragments that never complete,
# reliable ids far ahead of a gap, unknown channels and message kinds, bodies that do not
# decode). See tools/against-server.sh for what is printed and checked.
#
#   tools/flood.sh [SECONDS]      default 60
set -euo pipefail
exec "$(dirname "$0")/against-server.sh" "${1:-60}" 10 --clients 3 --flood
