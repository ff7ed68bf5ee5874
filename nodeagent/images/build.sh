#!/usr/bin/env bash
# Build the Deskpool desktop images locally (no registry is reachable from the nodes).
#
#   build.sh [base|tiny|desktop|studio|studio-cuda|all] [--force]
#
# An image that already exists is skipped unless --force, or, for tiny, desktop and studio,
# unless it was built from other sources (label deskpool.source). tiny and desktop build on
# top of base, studio on top of desktop; asking for one builds what it needs first if missing.
# studio-cuda (studio with PyTorch's CUDA build, ~5 GB more, for GPU nodes) is not part of
# all: build it on the nodes whose profiles name it.
#
# Environment:
#   DESKPOOL_DEBIAN_MIRROR          Debian mirror (default: read from the host's apt sources)
#   DESKPOOL_DEBIAN_SECURITY_MIRROR security mirror (default: from apt sources, else none)
#   DESKPOOL_IMAGE_WORKDIR          scratch space for debootstrap (default /var/tmp/deskpool-images)
#   DESKPOOL_BUILD_NETWORK          force "bridge" or "host" for docker build RUN steps
#   DESKPOOL_PIP                    the pip that fetches studio-cuda's wheels (default: the
#                                   project's .venv/bin/pip, else python3 -m pip)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SUITE=bookworm
BASE_IMAGE=deskpool/base:bookworm
TINY_IMAGE=deskpool/tiny:latest
DESKTOP_IMAGE=deskpool/desktop:latest
STUDIO_IMAGE=deskpool/studio:latest
STUDIO_CUDA_IMAGE=deskpool/studio-cuda:latest
# PyTorch's CUDA build for studio-cuda, and the Python and platform its wheels are for
# (Debian bookworm's Python 3.11 on x86_64).
TORCH_CUDA=torch==2.14.1
WORKROOT=${DESKPOOL_IMAGE_WORKDIR:-/var/tmp/deskpool-images}

target=all
force=0
for arg in "$@"; do
    case $arg in
        base|tiny|desktop|studio|studio-cuda|all) target=$arg ;;
        --force) force=1 ;;
        -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "unknown argument: $arg (want base|tiny|desktop|studio|studio-cuda|all [--force])" >&2; exit 2 ;;
    esac
done

log() { printf '[build %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

# Run a command as a named step and report how long it took.
step() {
    local name=$1; shift
    local t0 t1
    log "start: $name"
    t0=$(date +%s.%N)
    "$@"
    t1=$(date +%s.%N)
    log "done:  $name ($(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}') s)"
}

image_exists() { docker image inspect "$1" >/dev/null 2>&1; }

image_size() { docker image inspect -f '{{.Size}}' "$1" | awk '{printf "%.0f MB", $1/1e6}'; }

# Print the first apt source URI whose suites include the given suite exactly
# ("bookworm" must not match "bookworm-security"). Reads deb822 *.sources and
# classic one-line sources; only "deb" entries count (not deb-src).
apt_source_uri() {
    local suite=$1
    local f
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -r "$f" ] || continue
        awk -v want="$suite" '
            function flush() {
                if (types ~ /(^| )deb( |$)/ && (" " suites " ") ~ (" " want " ") && uris != "") {
                    split(uris, u, " "); print u[1]; found = 1; exit
                }
                types = ""; suites = ""; uris = ""
            }
            /^[ \t]*$/ { flush(); next }
            /^[ \t]*#/ { next }
            tolower($1) == "types:"  { $1 = ""; types = $0 }
            tolower($1) == "suites:" { $1 = ""; suites = $0 }
            tolower($1) == "uris:"   { $1 = ""; uris = $0 }
            END { if (!found) flush() }
        ' "$f"
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -r "$f" ] || continue
        # deb [options] URI suite components...
        sed -E 's/\[[^]]*\]//' "$f" | awk -v want="$suite" '$1 == "deb" && $3 == want { print $2 }'
    done
}

MIRROR=${DESKPOOL_DEBIAN_MIRROR:-$(apt_source_uri "$SUITE" | head -n1)}
MIRROR=${MIRROR%/}
if [ -z "$MIRROR" ]; then
    echo "no Debian mirror for $SUITE in the apt sources; set DESKPOOL_DEBIAN_MIRROR" >&2
    exit 1
fi
SECURITY_MIRROR=${DESKPOOL_DEBIAN_SECURITY_MIRROR-$(apt_source_uri "$SUITE-security" | head -n1)}
SECURITY_MIRROR=${SECURITY_MIRROR%/}

# The sources.list baked into the images: the same mirror the host uses, so that
# apt inside a container works wherever the host's apt works.
image_sources_list() {
    echo "deb $MIRROR $SUITE main"
    echo "deb $MIRROR $SUITE-updates main"
    if [ -n "$SECURITY_MIRROR" ]; then
        echo "deb $SECURITY_MIRROR $SUITE-security main"
    fi
}

build_base() {
    command -v debootstrap >/dev/null || { echo "debootstrap is not installed" >&2; exit 1; }
    mkdir -p "$WORKROOT"
    work=$(mktemp -d "$WORKROOT/base.XXXXXX")
    # The rootfs is ~300 MB of root-owned files: remove it even when a step fails.
    trap 'rm -rf "$work"' EXIT

    log "mirror: $MIRROR${SECURITY_MIRROR:+ (security: $SECURITY_MIRROR)}"
    step "debootstrap --variant=minbase $SUITE" \
        debootstrap --variant=minbase "$SUITE" "$work/rootfs" "$MIRROR"

    image_sources_list >"$work/rootfs/etc/apt/sources.list"
    # Images stay small only if nothing pulls in recommends and apt does not keep .debs.
    cat >"$work/rootfs/etc/apt/apt.conf.d/90deskpool" <<'APT'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
Acquire::Languages "none";
APT
    # As in Docker's official Debian images: no binary package caches (apt rebuilds
    # them after every run, ~70 MB per layer) and no .debs left after installing.
    cat >"$work/rootfs/etc/apt/apt.conf.d/91deskpool-clean" <<'APT'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
APT
    # debootstrap leaves the package lists and downloaded .debs behind.
    rm -rf "$work/rootfs/var/lib/apt/lists/"* "$work/rootfs/var/cache/apt/archives/"*.deb
    # Containers must not inherit the build host's identity.
    : >"$work/rootfs/etc/hostname"
    rm -f "$work/rootfs/etc/machine-id" "$work/rootfs/var/lib/dbus/machine-id"

    step "docker import $BASE_IMAGE" bash -c \
        'tar -C "$1/rootfs" --numeric-owner -c . | docker import \
            --change "ENV LANG=C.UTF-8" --change "CMD [\"/bin/bash\"]" - "$2" >/dev/null' \
        _ "$work" "$BASE_IMAGE"
    rm -rf "$work"
    trap - EXIT
    log "$BASE_IMAGE: $(image_size "$BASE_IMAGE")"
}

# How RUN steps reach the mirror. Measured here: the default bridge network
# reaches the host's mirror, so plain `docker build` works. Where the bridge has
# no route out (no NAT / firewalled), `--network host` usually still does. If
# neither works the packages would have to be installed by chroot on the host;
# that is not implemented, the build stops with a message instead.
BUILD_NETWORK=
pick_build_network() {
    [ -n "$BUILD_NETWORK" ] && return 0
    if [ -n "${DESKPOOL_BUILD_NETWORK:-}" ]; then
        BUILD_NETWORK=$DESKPOOL_BUILD_NETWORK
        log "build network: $BUILD_NETWORK (from DESKPOOL_BUILD_NETWORK)"
        return 0
    fi
    local net
    for net in bridge host; do
        # Probe with the same requests the RUN steps will make.
        if docker run --rm --network "$net" "$BASE_IMAGE" \
            timeout 15 apt-get -qq -o Acquire::Retries=0 update >/dev/null 2>&1; then
            BUILD_NETWORK=$net
            log "build network: $net (the mirror answers from a container)"
            return 0
        fi
        log "build network: $net cannot reach $MIRROR"
    done
    echo "no container network reaches $MIRROR; installing by chroot is not implemented" >&2
    exit 1
}

build_layer() {
    local image=$1 dockerfile=$2
    pick_build_network
    # Legacy builder (no buildx on these hosts): --network applies to RUN steps.
    # --force means fresh packages too, not layers cached from an earlier build.
    local nocache=()
    [ "$force" = 1 ] && nocache=(--no-cache)
    step "docker build $image" docker build --network "$BUILD_NETWORK" "${nocache[@]}" \
        --build-arg BASE_IMAGE="$BASE_IMAGE" --build-arg DESKTOP_IMAGE="$DESKTOP_IMAGE" --label "deskpool.source=$SOURCE" \
        -f "$HERE/$dockerfile" -t "$image" "$HERE"
    log "$image: $(image_size "$image")"
}

# The Dockerfile and every file it may COPY, hashed: a tiny or desktop image carries it as
# the label deskpool.source, and one built from other sources is rebuilt (Docker's layer
# cache keeps that quick when little changed). Base is keyed by its tag alone.
# studio is hashed with desktop's Dockerfile as well: a new desktop means a new studio.
source_hash() {
    (cd "$HERE" && cat "$@" $(find files -type f | LC_ALL=C sort) | sha256sum | cut -c1-16)
}

image_source() {
    docker image inspect -f '{{index .Config.Labels "deskpool.source"}}' "$1" 2>/dev/null || true
}

# Build one image unless it exists from the same sources (and no --force).
want() {
    local name=$1 image=$2
    SOURCE=""
    case $name in
        base) ;;
        studio) SOURCE=$(source_hash Dockerfile.desktop Dockerfile.studio) ;;
        # With the wheels' version, and the files the desktop copies in, as for studio.
        studio-cuda)
            SOURCE=$( (printf '%s\n' "$TORCH_CUDA"; source_hash Dockerfile.desktop \
                Dockerfile.studio Dockerfile.studio-cuda) | sha256sum | cut -c1-16) ;;
        *) SOURCE=$(source_hash "Dockerfile.$name") ;;
    esac
    if [ "$force" = 0 ] && image_exists "$image"; then
        if [ -z "$SOURCE" ] || [ "$(image_source "$image")" = "$SOURCE" ]; then
            log "skip:  $image exists ($(image_size "$image")); use --force to rebuild"
            return 0
        fi
        log "rebuild: $image was built from other sources than these ($SOURCE)"
    fi
    if image_exists "$image"; then
        REPLACED=("$(docker image inspect -f '{{.Id}}' "$image")" "${REPLACED[@]}")
    fi
    case $name in
        base) build_base ;;
        tiny) build_layer "$image" Dockerfile.tiny ;;
        desktop) build_layer "$image" Dockerfile.desktop ;;
        studio) build_layer "$image" Dockerfile.studio ;;
        studio-cuda) build_studio_cuda "$image" ;;
    esac
}

# studio-cuda: the wheels are installed on the host into a build context of their own (the
# container's Python is the same Debian 3.11), then copied into the image; nothing inside
# the build reaches the network.
build_studio_cuda() {
    local image=$1 context="$WORKROOT/studio-cuda"
    local pip=${DESKPOOL_PIP:-}
    if [ -z "$pip" ]; then
        if [ -x "$HERE/../../.venv/bin/pip" ]; then pip="$HERE/../../.venv/bin/pip"; else pip="python3 -m pip"; fi
    fi
    rm -rf "$context"
    mkdir -p "$context"
    # Debian's packages stay in charge of setuptools and its distutils hook.
    step "pip install $TORCH_CUDA (CUDA wheels) into $context/site" $pip install --quiet \
        --no-compile --target "$context/site" --only-binary=:all: --python-version 3.11 \
        --implementation cp --abi cp311 \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
        --platform manylinux_2_25_x86_64 --platform manylinux_2_18_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        --platform manylinux_2_12_x86_64 --platform manylinux2010_x86_64 \
        --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 --platform any \
        "$TORCH_CUDA"
    rm -rf "$context/site/bin" "$context/site/setuptools"* "$context/site/_distutils_hack" \
        "$context/site/distutils-precedence.pth" "$context/site/pkg_resources"
    local nocache=()
    [ "$force" = 1 ] && nocache=(--no-cache)
    step "docker build $image" docker build --network none "${nocache[@]}" \
        --build-arg STUDIO_IMAGE="$STUDIO_IMAGE" --label "deskpool.source=$SOURCE" \
        -f "$HERE/Dockerfile.studio-cuda" -t "$image" "$context"
    rm -rf "$context"
    log "$image: $(image_size "$image")"
}

# Images a --force rebuild replaced, newest first (children before their base).
REPLACED=()
SOURCE=""  # set by want(): the source hash of the image being built
# Each forced rebuild would otherwise leave ~1.4 GB of untagged images behind.
# Removal fails harmlessly for an image a container still uses.
remove_replaced() {
    local id
    for id in "${REPLACED[@]}"; do
        docker image rm "$id" >/dev/null 2>&1 && log "removed replaced image ${id:7:12}" || true
    done
}

total0=$(date +%s.%N)
case $target in
    base) want base "$BASE_IMAGE" ;;
    tiny|desktop|studio|studio-cuda)
        # A forced tiny/desktop/studio rebuild reuses an existing base: it is the slow,
        # rarely-changing part. `build.sh base --force` rebuilds it.
        image_exists "$BASE_IMAGE" || force=1 want base "$BASE_IMAGE"
        case $target in
            tiny) want tiny "$TINY_IMAGE" ;;
            desktop) want desktop "$DESKTOP_IMAGE" ;;
            # studio's sources include desktop's (one hash): an outdated desktop is rebuilt first.
            studio) want desktop "$DESKTOP_IMAGE"; want studio "$STUDIO_IMAGE" ;;
            studio-cuda)
                want desktop "$DESKTOP_IMAGE"
                want studio "$STUDIO_IMAGE"
                want studio-cuda "$STUDIO_CUDA_IMAGE"
                ;;
        esac
        ;;
    all)
        want base "$BASE_IMAGE"
        want tiny "$TINY_IMAGE"
        want desktop "$DESKTOP_IMAGE"
        want studio "$STUDIO_IMAGE"
        ;;
esac
remove_replaced
log "total: $(awk -v a="$total0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s"
