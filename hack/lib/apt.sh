# shellcheck shell=bash
# apt_install PKG...: installs Debian packages with apt-get, one install at a
# time on this machine. Test processes run side by side (hack/e2e.sh), and
# each may find a package missing on a fresh machine: without this lock the
# second apt-get fails at once on apt's own lock ("Could not get lock
# /var/lib/apt/lists/lock"). The machine-wide flock queues them, apt's
# DPkg::Lock::Timeout waits out any other apt (unattended-upgrades), and a
# queued install of what the first one installed is a quick no-op.
apt_install() {
  local sudo=()
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "apt_install: missing $*; run as root or apt-get install them" >&2; return 1; }
    sudo=(sudo)
  fi
  "${sudo[@]}" flock -w 1800 /var/lock/bloodraven-apt.lock env DEBIAN_FRONTEND=noninteractive sh -c \
    'apt-get -o DPkg::Lock::Timeout=600 update -qq && apt-get -o DPkg::Lock::Timeout=600 install -y -qq "$@"' \
    apt_install "$@"
}
