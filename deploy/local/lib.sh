# Shell helpers shared by deploy/local/up, demo and down (sourced, not run).

# free_ports N [USED...]: prints N distinct ports free on 127.0.0.1, none of
# USED. Picked at random
# below the kernel's ephemeral range (where outgoing connections take their
# local ports), so side-by-side clusters rarely meet; a clash that still
# happens between the check and the component's bind is retried by start().
free_ports() {
  python3 - "$@" <<'EOF'
import random, socket, sys
n, used = int(sys.argv[1]), {int(p) for p in sys.argv[2:]}
lo, _ = (int(x) for x in open("/proc/sys/net/ipv4/ip_local_port_range").read().split())
held, ports = [], []
def try_bind(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        s.close()
        return None
    held.append(s)  # keep it bound so this call never returns a port twice
    return s.getsockname()[1]
candidates = list(range(10000, lo)) if lo > 11000 else []
random.shuffle(candidates)
for port in candidates:
    if len(ports) == n:
        break
    if port not in used and try_bind(port):
        ports.append(port)
while len(ports) < n:  # fallback: let the kernel choose
    port = try_bind(0)
    if port and port not in used:
        ports.append(port)
print(" ".join(map(str, ports)))
EOF
}

# alive PID: PID runs (and is not a zombie).
alive() {
  local stat
  stat=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
  [[ $stat != Z* ]]
}

# ours DIR PID: PID runs and belongs to the cluster in DIR (its command line
# names DIR).
ours() {
  local cmd
  alive "$2" || return 1
  cmd=$(tr '\0' ' ' <"/proc/$2/cmdline" 2>/dev/null) || return 1
  [[ $cmd == *"$1/"* || $cmd == *"$1 "* ]]
}
