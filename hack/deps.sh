#!/usr/bin/env bash
# Installs, with apt-get, the Debian packages the playground and the tests need
# when they are missing: MariaDB (server and client, for the sites), debootstrap
# (MySQL's root, below), certificates, free ports, network namespaces, the local node (containerd,
# runc, the CNI plugins, iptables, conntrack), image packing without a daemon
# (umoci, busybox-static, binutils' strip, glibc's static libc for the
# operator's static binary), curl for the tools image, and Python's venv
# module for the API fuzzer (hack/schemathesis.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=lib/apt.sh
. "$root/hack/lib/apt.sh"
need=()
# The MariaDB sites (hack/mariadb.sh). Installed here, before any test runs:
# tests run side by side, and each would otherwise install it on first use.
{ command -v mariadbd && command -v mariadb-install-db && command -v mariadb && command -v mariadb-admin; } >/dev/null \
  || need+=(mariadb-server mariadb-client)
# The MySQL sites (hack/mysql.sh) run MySQL from a Debian sid root that
# debootstrap makes (hack/build-mysql.sh); curl and xz read sid's version.
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v xz >/dev/null || need+=(xz-utils)
command -v openssl >/dev/null || need+=(openssl)
command -v python3 >/dev/null || need+=(python3)
# schemathesis is installed into a venv (hack/schemathesis.sh): Debian splits venv and ensurepip out.
python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
# hack/chart.sh compares the chart's webhook configurations with the binary's (parsed YAML).
python3 -c 'import yaml' 2>/dev/null || need+=(python3-yaml)
# The partition test puts a site in its own network namespace (needs root).
command -v ip >/dev/null || need+=(iproute2)
# The local node (hack/node.sh): container runtime, CNI plugins, image
# packing without a daemon, kube-proxy's iptables, a shell image for tests.
command -v containerd >/dev/null || need+=(containerd)
command -v runc >/dev/null || need+=(runc)
[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
command -v umoci >/dev/null || need+=(umoci)
# grep without -q reads to the end: with pipefail, -q's early exit can kill
# the writer with SIGPIPE and fail the pipe (seen: 1 run in 50).
[ -x /bin/busybox ] && /bin/busybox --list 2>/dev/null | grep -x nc >/dev/null || need+=(busybox-static)
command -v iptables >/dev/null || need+=(iptables)
command -v conntrack >/dev/null || need+=(conntrack)
command -v curl >/dev/null || need+=(curl)
# hack/e2e.sh runs test files side by side (GNU parallel) and reads cargo's
# JSON messages (jq).
command -v parallel >/dev/null || need+=(parallel)
command -v jq >/dev/null || need+=(jq)
# Argo CD's cache for the example chart's Argo CD path (tests/src/argocd.rs).
command -v redis-server >/dev/null || need+=(redis-server)
# Flyway's image for the third-party tool tests (hack/tool-images.sh): a
# Java runtime that jlink makes from the JDK, with the modules jdeps finds.
{ command -v jlink && command -v jdeps; } >/dev/null || need+=(openjdk-17-jdk-headless)
# Pushing the images to a registry (hack/images.sh push, hack/registry-smoke.sh).
command -v skopeo >/dev/null || need+=(skopeo)
command -v strip >/dev/null || need+=(binutils)
[ -f /usr/lib/x86_64-linux-gnu/libc.a ] || need+=(libc6-dev)
if [ ${#need[@]} -gt 0 ]; then
  echo "deps.sh: installing ${need[*]}" >&2
  apt_install "${need[@]}"
fi
# MySQL's root, before any test runs (tests run side by side, and the first
# MySQL site of each would otherwise wait for the ~1 min build). Cached: a
# warm run reads a symlink; once a day it asks sid for a newer version of the
# series (about 1 s) and builds it when there is one.
"$root/hack/build-mysql.sh" daily >/dev/null
