# Sourced by push_memory.sh and push_wire.sh: $here (bench/), a temporary directory $tmp removed at
# exit with the jobs the script started, bench/busy_threads.c built in it, and $port, a loopback
# port that was free a moment ago.
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d /tmp/push-bench-XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
cc -O2 -g -pthread -o "$tmp/busy_threads" "$here/busy_threads.c"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
