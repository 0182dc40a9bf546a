# shellcheck shell=bash
# detach CMD...: starts CMD in the background in its own session, stdin from
# /dev/null, with none of the caller's open files but stdout and stderr
# (redirect those at the call). A daemon must not inherit, say, the fd of a
# caller's `flock`: it would hold that lock for as long as it runs, long
# after the caller has exited. $! is CMD's pid (setsid execs in place: a
# background subshell is not a process-group leader).
detach() {
  (
    for fd in /proc/self/fd/*; do
      fd=${fd##*/}
      if [ "$fd" -gt 2 ] 2>/dev/null; then eval "exec $fd>&-" 2>/dev/null || true; fi
    done
    exec setsid "$@"
  ) </dev/null &
}
