#!/usr/bin/env bash
# Shared by flood.sh and soak.sh: starts the shooter's dedicated server (a real process, UDP on
# loopback) printing a status line every STATS seconds, runs `loadtest` against it with the
# given arguments, lets the server see everyone leave, then prints the server's first and last
# status lines and checks what a match may leave behind.
#
#   tools/against-server.sh SECONDS STATS loadtest-args...
#
# Exit 1 when loadtest said the honest players were not clean, the server died or panicked,
# it kept entities, links or addresses after everyone left, or its memory more than doubled.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=$1 stats=$2; shift 2
target=${CARGO_TARGET_DIR:-target}
echo "against-server: building the server and loadtest examples (dev profile)"
# --workspace: the features the test command builds with, so after it nothing is rebuilt.
cargo build --locked -q --workspace --example server --example loadtest
port=$((20000 + RANDOM % 20000))
log=$(mktemp)
trap 'kill "$server" 2>/dev/null || true; rm -f "$log"' EXIT
# The server outlives the players by 20 s: netcode's timeout, then a status line with no one.
"$target/debug/examples/server" "127.0.0.1:$port" --stats "$stats" \
    --seconds "$((seconds + 21 + 2 * stats))" >"$log" 2>&1 &
server=$!
for _ in $(seq 100); do grep -q "serving on udp" "$log" && break; sleep 0.1; done
# One status period with no one yet (assets loaded, bots and their hit boxes spawned): the
# baseline of what must be left once everyone has gone.
sleep "$((stats + 1))"
verdict=0
"$target/debug/examples/loadtest" --server "127.0.0.1:$port" --seconds "$seconds" "$@" 2>&1 \
    | grep -v " INFO \| DEBUG " || verdict=1
if ! kill -0 "$server" 2>/dev/null; then
    echo "against-server: the server died during the run"; tail -20 "$log"; exit 1
fi
wait "$server" || true
if grep -q "panicked" "$log"; then
    echo "against-server: the server panicked"; grep -A5 panicked "$log" | head -20; exit 1
fi
echo "server warnings, by kind (the counts in them are the server's own):"
sed 's/\x1b\[[0-9;]*m//g' "$log" | grep " WARN " | sed 's/.* WARN //; s/[0-9][0-9.]*/N/g' \
    | sort | uniq -c | sort -rn | head -12 || true
stats_lines=$(sed 's/\x1b\[[0-9;]*m//g' "$log" | grep "^server stats:")
empty=$(echo "$stats_lines" | sed -n 2p)  # before anyone joined (the first line is at start)
first=$(echo "$stats_lines" | sed -n 3p)  # the first period with the players in
busy=$(echo "$stats_lines" | grep -v " connected=0 " | tail -1)  # the last one with them
last=$(echo "$stats_lines" | tail -1)
echo "before:        $empty"
echo "first period:  $first"
echo "last busy:     $busy"
echo "all gone:      $last"
field() { echo "$1" | grep -o " $2=[0-9.]*" | cut -d= -f2; }
for f in entities links addresses; do
    if [ "$(field "$last" $f)" != "$(field "$empty" $f)" ]; then
        echo "against-server: $f left behind: $(field "$empty" $f) at start, $(field "$last" $f) after everyone left"
        verdict=1
    fi
done
rss_first=$(field "$first" rss_kb) rss_last=$(field "$last" rss_kb)
echo "memory: ${rss_first} kB in the first period, ${rss_last} kB at the end"
if [ "$rss_last" -gt $((rss_first * 2)) ]; then
    echo "against-server: memory more than doubled"; verdict=1
fi
exit "$verdict"
