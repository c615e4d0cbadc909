#!/usr/bin/env bash
# apt_install PACKAGE WHY: installs one Debian package with apt-get, saying so, as root or
# through sudo. Sourced by the scripts/setup_*.sh scripts, which call it only when what
# they need is missing.

apt_install() {
    local pkg="$1" why="$2" sudo=""
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "error: $why, and there is no apt-get here: install '$pkg' by hand." >&2
        return 3
    fi
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
            echo "error: $why; installing it needs root (apt-get install $pkg): run as root or with sudo." >&2
            return 3
        fi
    fi
    echo "setup: $why; installing Debian's '$pkg' package (apt-get install -y $pkg)"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$pkg" >/dev/null
}
