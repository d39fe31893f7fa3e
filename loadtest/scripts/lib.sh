# Shared by the drill scripts (sourced): a free port, and the processes a
# drill started, stopped whatever ends the script.

# A port the kernel says is free now.
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# The pids of the processes the running drill started; a drill empties it
# once they have ended, so no stale pid is signalled later.
STARTED=()

# Wakes (SIGCONT), stops (SIGTERM) and after 1 s kills what STARTED names.
stop_started() {
  [ ${#STARTED[@]} -gt 0 ] || return 0
  kill -CONT "${STARTED[@]}" 2>/dev/null || true
  kill -TERM "${STARTED[@]}" 2>/dev/null || return 0
  sleep 1
  kill -KILL "${STARTED[@]}" 2>/dev/null || true
}
