#!/usr/bin/env bash
# The Debian packages of the executor image (internal/dev/debroot), pinned by
# hack/executor-debs.lock: one line per package — name, version, architecture, SHA256 of the
# .deb, its size and the mirror URI it was resolved from.
#
#   hack/executor-debs.sh resolve [--no-update]
#       Recomputes the lock: the dependency closure of ROOTS below, as apt resolves it on an
#       empty system of its own (a private apt state under the cache: its own sources list of
#       Debian bookworm, bookworm-updates and bookworm-security, its own lists, and a dpkg
#       status that holds only the STUBS below), and rewrites the lock. The same apt lists
#       give the same lock: nothing of this machine's apt configuration or installed packages
#       is read. --no-update resolves against the lists fetched last time, without network.
#   hack/executor-debs.sh fetch [DIR]
#       Downloads exactly the locked .debs into DIR/<first 16 hex of the lock's SHA256>/
#       (DIR defaults to the cache below), verifies every SHA256 and prints that directory.
#       Idempotent: once a directory is complete (its '.complete' stamp is written last)
#       nothing is downloaded again; a .deb already fetched for another lock is reused by
#       hash.
#
# The cache is EXECUTOR_DEBS_CACHE, default $CLUSTER_BIN_CACHE/executor-debs, i.e.
# ~/.cache/execplane/executor-debs (debroot.DefaultCacheDir says the same). EXECUTOR_DEBS_LOCK
# names another lock (a test's).
#
# Debian's mirror serves only the current versions of a release: once a locked version is
# superseded (a point release, a security update) fetch fails, saying to re-run resolve and
# commit the new lock (snapshot.debian.org, which keeps every version, is not reachable from
# the machines this runs on).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LOCK=${EXECUTOR_DEBS_LOCK:-$ROOT/hack/executor-debs.lock}
CACHE=${EXECUTOR_DEBS_CACHE:-${CLUSTER_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/execplane}/executor-debs}
ARCH=amd64
MIRROR=http://deb.debian.org

# What the image is for: a shell user's tools, Python and git. Everything else is what these
# depend on (Depends and Pre-Depends; no Recommends).
#   bash coreutils dash        the shells (/bin/sh is dash, as on Debian) and the basic tools
#   findutils grep sed mawk diffutils tar gzip xz-utils
#                              what scripts expect of a Debian shell; mawk is Debian's awk
#   debianutils                which (and run-parts, tempfile)
#   ncurses-base               terminfo, for bash's line editing and less in a terminal
#   less                       git's pager (Debian's git runs "pager", the alternative to less)
#   procps                     ps, pgrep, pkill, top, free, kill, watch
#   curl ca-certificates       https for curl, git and pip, with Mozilla's CA bundle
#   netbase                    /etc/services, /etc/protocols (socket.getservbyname, getprotobyname)
#   git python3 python3-pip python3-venv python-is-python3
#                              git; Python with pip, venv and the "python" command
ROOTS=(
  bash coreutils dash findutils grep sed mawk diffutils tar gzip xz-utils debianutils
  ncurses-base less procps curl ca-certificates netbase
  git python3 python3-pip python3-venv python-is-python3
)
# Packages taken as installed without being in the image, so that apt resolves around them:
#   dpkg debconf init-system-helpers   only maintainer scripts use them, and an image unpacked
#                                      from .debs runs none (debroot does their work itself)
#   perl liberror-perl                 only git's Perl commands (send-email, svn, cvs*,
#                                      archimport, the old add--interactive) need Perl; the
#                                      core of git is C and shell. Saves perl, perl-modules,
#                                      libperl (about 30 MB installed)
#   git-man                            manual pages: the image carries none (debroot leaves
#                                      /usr/share/man out)
STUBS=(dpkg debconf init-system-helpers perl liberror-perl git-man)

die() { echo "executor-debs: $*" >&2; exit 1; }

# apt_sandbox writes a private apt configuration under $CACHE/apt and exports APT_CONFIG.
apt_sandbox() {
  local a=$CACHE/apt
  mkdir -p "$a/etc/apt.conf.d" "$a/etc/preferences.d" "$a/etc/sources.list.d" \
    "$a/state/lists/partial" "$a/cache/archives/partial"
  cat >"$a/etc/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $MIRROR/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $MIRROR/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  cat >"$a/apt.conf" <<EOF
Dir "/";
Dir::Etc "$a/etc";
Dir::Etc::main "/dev/null";
Dir::Etc::Parts "apt.conf.d";
Dir::Etc::PreferencesParts "preferences.d";
Dir::Etc::SourceList "/dev/null";
Dir::Etc::SourceParts "sources.list.d";
Dir::State "$a/state";
Dir::State::status "$a/status";
Dir::Cache "$a/cache";
APT::Architecture "$ARCH";
APT::Architectures { "$ARCH"; };
APT::Install-Recommends "false";
APT::Install-Suggests "false";
Acquire::Languages "none";
Debug::NoLocking "true";
APT::Sandbox::User "$(id -un)";
EOF
  export APT_CONFIG=$a/apt.conf
  : >"$a/status"
}

# stub_status writes the dpkg status of the stubs: each "held" at its candidate version, with
# no dependencies of its own (held, so apt neither upgrades nor replaces it).
stub_status() {
  local p v arch
  for p in "${STUBS[@]}"; do
    v=$(apt-cache show --no-all-versions "$p" | sed -n 's/^Version: //p')
    arch=$(apt-cache show --no-all-versions "$p" | sed -n 's/^Architecture: //p')
    [ -n "$v" ] || die "stub $p: no candidate in the lists"
    printf 'Package: %s\nStatus: hold ok installed\nVersion: %s\nArchitecture: %s\n' "$p" "$v" "$arch"
    [ "$p" = debconf ] && printf 'Provides: debconf-2.0\n'
    printf '\n'
  done >"$CACHE/apt/status"
}

resolve() {
  local update=1
  [ "${1:-}" = --no-update ] && update=0
  [ -f /usr/share/keyrings/debian-archive-keyring.gpg ] || die "needs debian-archive-keyring"
  apt_sandbox
  if [ $update = 1 ] || ! ls "$CACHE"/apt/state/lists/*_Packages >/dev/null 2>&1; then
    apt-get update -qq >&2 || die "apt-get update failed (is $MIRROR reachable?)"
  fi
  stub_status
  # name=version of every package apt would install on that empty system.
  local sim
  sim=$(apt-get install -s -y "${ROOTS[@]}") || die "apt cannot resolve: ${ROOTS[*]}"
  mapfile -t want < <(sed -n 's/^Inst \([^ ]*\) (\([^ ]*\) .*/\1=\2/p' <<<"$sim" | LC_ALL=C sort)
  [ ${#want[@]} -gt 0 ] || die "apt resolved nothing"
  # 'URI' name_version_arch.deb size SHA256:hash, one per package.
  local uris tmp
  uris=$(apt-get download --print-uris "${want[@]}")
  tmp=$(mktemp "$LOCK.XXXXXX")
  {
    echo "# The executor image's Debian packages (internal/dev/debroot), generated by"
    echo "# \`hack/executor-debs.sh resolve\`: do not edit. Roots: ${ROOTS[*]}."
    echo "# Taken as installed, not in the image: ${STUBS[*]}."
    echo "# name version architecture sha256 size uri"
    while read -r uri file size sum; do
      uri=${uri//\'/}
      local base=${file%.deb} name version arch
      name=${base%%_*}; arch=${base##*_}; version=${base#*_}; version=${version%_*}
      version=${version//%3a/:}
      [ "${sum%%:*}" = SHA256 ] || die "$name: apt gave no SHA256 ($sum)"
      echo "$name $version $arch ${sum#SHA256:} $size $uri"
    done <<<"$uris" | LC_ALL=C sort
  } >"$tmp"
  local n
  n=$(grep -vc '^#' "$tmp")
  [ "$n" = ${#want[@]} ] || { rm -f "$tmp"; die "resolved ${#want[@]} packages but got $n URIs"; }
  mv "$tmp" "$LOCK"
  echo "executor-debs: locked $n packages, $(awk '!/^#/ {s+=$5} END {printf "%.1f MB", s/1e6}' "$LOCK") of .debs, in $LOCK" >&2
}

fetch() {
  local dir=${1:-$CACHE}
  [ -f "$LOCK" ] || die "no lock at $LOCK: run $0 resolve"
  local key out
  key=$(sha256sum "$LOCK" | cut -c1-16)
  out=$dir/$key
  if [ -f "$out/.complete" ]; then echo "$out"; exit 0; fi
  mkdir -p "$out"
  local name version arch sum size uri f have missing=()
  while read -r name version arch sum size uri; do
    f=$out/${name}_${version//:/%3a}_${arch}.deb
    if [ -f "$f" ] && [ "$(sha256sum <"$f" | cut -c1-64)" = "$sum" ]; then continue; fi
    # The same .deb fetched for another lock.
    have=$(find "$dir" -mindepth 2 -maxdepth 2 -name "$(basename "$f")" -not -path "$out/*" -print -quit)
    if [ -n "$have" ] && [ "$(sha256sum <"$have" | cut -c1-64)" = "$sum" ]; then
      cp "$have" "$f.part" && mv "$f.part" "$f"
      continue
    fi
    local code
    code=$(curl -sS -L --retry 3 -o "$f.part" -w '%{http_code}' "$uri") || code=000
    if [ "$code" = 404 ] || [ "$code" = 410 ]; then
      rm -f "$f.part"
      missing+=("$name=$version")
      continue
    fi
    [ "$code" = 200 ] || { rm -f "$f.part"; die "$name=$version: $uri: HTTP $code"; }
    [ "$(sha256sum <"$f.part" | cut -c1-64)" = "$sum" ] || { rm -f "$f.part"; die "$name=$version: $uri: SHA256 is not the locked $sum"; }
    mv "$f.part" "$f"
  done < <(grep -v '^#' "$LOCK")
  if [ ${#missing[@]} -gt 0 ]; then
    die "the mirror no longer serves ${missing[*]} (superseded since the lock was made): run '$0 resolve', then fetch again and commit hack/executor-debs.lock"
  fi
  touch "$out/.complete"
  echo "$out"
}

case ${1:-} in
  resolve) shift; resolve "$@" ;;
  fetch) shift; fetch "$@" ;;
  *) die "usage: $0 resolve [--no-update] | fetch [DIR]" ;;
esac
