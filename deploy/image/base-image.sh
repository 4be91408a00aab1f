#!/usr/bin/env bash
# A Debian bookworm base image with Python 3.11 and pip, made from Debian's packages alone: for building
# Embento's image where no container registry is reachable (BentoML's default base is Docker Hub's
# python:3.11-slim). Loads it into podman's storage (buildah reads the same) as the image named.
#
#   deploy/image/base-image.sh localhost/embento-base:bookworm
#   embento build --base-image localhost/embento-base:bookworm ...
#
# MIRROR: the Debian mirror to build from (default deb.debian.org); an internal mirror works the same.
set -euo pipefail
name=${1:?usage: base-image.sh <image name, e.g. localhost/embento-base:bookworm>}
mirror=${MIRROR:-http://deb.debian.org/debian}
security=${SECURITY_MIRROR:-http://deb.debian.org/debian-security}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# EXTERNALLY-MANAGED goes: BentoML's template installs uv with the system pip. The package lists go: the
# image's build runs `apt-get update` itself.
mmdebstrap --quiet --variant=minbase --include=python3.11,python3-pip,ca-certificates \
    --customize-hook='rm -f "$1"/usr/lib/python3.11/EXTERNALLY-MANAGED' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
    bookworm "$scratch/base.tar" \
    "deb $mirror bookworm main" "deb $mirror bookworm-updates main" "deb $security bookworm-security main"
podman import --quiet \
    --change 'ENV LANG=C.UTF-8' --change 'CMD ["/bin/bash"]' \
    "$scratch/base.tar" "$name" >/dev/null
echo "$name"
