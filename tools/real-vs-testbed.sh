#!/usr/bin/env bash
# The report's figures for one set of link conditions, measured two ways in one run: the
# in-process testbed (the shooter's server and the scripted players in one process, the link
# simulated by the testbed) and real processes (the shooter's dedicated server, the same
# players in a `loadtest` process over UDP on loopback, the link conditioner on the players).
# Prints both side by side in one Markdown table.
#
#   tools/real-vs-testbed.sh [SECONDS] [loadtest-args...]
#       default: 60 s, 4 players at 60 fps, RTT 100 ms, jitter 10 ms, loss 2 %
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
if [ $# -eq 0 ]; then set -- --clients 4 --rtt 100 --jitter 10 --loss 2; fi
target=${CARGO_TARGET_DIR:-target}
echo "real-vs-testbed: building the server and loadtest examples (dev profile)"
cargo build --locked -q --workspace --example server --example loadtest
port=$((20000 + RANDOM % 20000))
log=$(mktemp)
trap 'kill "$server" 2>/dev/null || true; rm -f "$log"' EXIT
# The server waits while the testbed plays first (faster than real time), then serves.
"$target/debug/examples/server" "127.0.0.1:$port" --stats 3600 \
    --seconds "$((3 * seconds + 120))" >"$log" 2>&1 &
server=$!
# Its readiness line: printed once the socket is bound (the log's "serving on udp" comes before).
for _ in $(seq 300); do grep -q "^ready: serving udp " "$log" && break; sleep 0.1; done
"$target/debug/examples/loadtest" --server "127.0.0.1:$port" --seconds "$seconds" --compare "$@" \
    2>&1 | grep -v " INFO \| DEBUG "
