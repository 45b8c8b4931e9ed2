#!/usr/bin/env bash
# Builds what make demo runs, a stage at a time, showing each as one line: what it builds, how
# long it has taken, how many packages it has compiled and an estimate of what is left (from
# the last run on this machine that did the work, else from the reference machine's cold run,
# docs/quickstart.md). The go commands' own output (downloads, package names) goes to a log
# it names; on failure it prints the log's last lines and the command to retry.
#
#   hack/build-demo.sh real|kwok      (make demo's DEV_NODE)
#
# Each stage's cache keeps what it built, so a retry or a second run starts where this one
# stopped and takes seconds once everything is built.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
NODE=${1:-real}
case $NODE in real|kwok) ;; *) echo "usage: hack/build-demo.sh real|kwok" >&2; exit 2 ;; esac
cd "$ROOT"
LOG=$ROOT/.state/build.log
mkdir -p "$ROOT/.state"
: >"$LOG"
# The toolchain and the cache the fixture scripts use (GOTOOLCHAIN, CACHE).
. hack/fixture-go.sh
TOOLCHAIN=$GOTOOLCHAIN
mkdir -p "$CACHE"
TIMES=$CACHE/build-demo-times
touch "$TIMES"
MAKE=${MAKE:-make}

# Seconds each stage took cold on the reference machine (2 cores; docs/quickstart.md): the
# estimate until this machine has run the stage itself.
declare -A REFERENCE=([go]=20 [execplane]=270 [cluster]=540 [cluster-kwok]=740 [node]=90 [debian]=15)

estimate() { # stage → seconds
  local s
  s=$(awk -v k="$1" '$1 == k { v = $2 } END { print v }' "$TIMES")
  echo "${s:-${REFERENCE[$1]:-60}}"
}

# Only a stage that did work is a measure of the work (a warm one takes a second or two).
record() { # stage seconds
  [ "$2" -ge 15 ] || return 0
  { grep -v "^$1 " "$TIMES" || true; echo "$1 $2"; } >"$TIMES.new"
  mv "$TIMES.new" "$TIMES"
}

mmss() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

left() { # elapsed estimate → words
  local r=$(($2 - $1))
  if [ "$r" -le 0 ]; then echo "longer than the estimate"
  elif [ "$r" -lt 60 ]; then echo "under a minute left"
  else echo "~$(((r + 30) / 60)) min left"; fi
}

TTY=
COLUMNS_=80
if [ -t 1 ]; then
  TTY=1
  COLUMNS_=$(tput cols 2>/dev/null || echo 80)
fi
STAGES=3
[ "$NODE" = real ] && STAGES=5
n=0
total_start=$(date +%s)

# stage KEY "what it builds" command...: runs the command with its output in the log, and
# shows its progress (packages: lines of a package path that the go commands' -v prints).
stage() {
  local key=$1 what=$2
  shift 2
  n=$((n + 1))
  local start est offset pid rc=0 last_report
  start=$(date +%s)
  est=$(estimate "$key")
  offset=$(($(stat -c %s "$LOG") + 1))
  printf '\n==> [%d/%d] %s\n' "$n" "$STAGES" "$what" >>"$LOG"
  "$@" >>"$LOG" 2>&1 &
  pid=$!
  printf '[%d/%d] %s\n' "$n" "$STAGES" "$what"
  last_report=$start
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    local now elapsed pkgs mods status
    now=$(date +%s)
    elapsed=$((now - start))
    pkgs=$(tail -c +"$offset" "$LOG" | grep -cE '^[A-Za-z0-9._~-]+(/[A-Za-z0-9._~+-]+)*$' || true)
    mods=$(tail -c +"$offset" "$LOG" | grep -c '^go: downloading' || true)
    status="      $(mmss "$elapsed")"
    [ "$mods" -eq 0 ] || status+=", $mods modules fetched"
    [ "$pkgs" -eq 0 ] || status+=", $pkgs packages compiled"
    status+=", $(left "$elapsed" "$est")"
    if [ -n "$TTY" ]; then
      # One line rewritten in place: never wider than the terminal, or it would wrap.
      printf '\r\033[K%s' "${status:0:$((COLUMNS_ - 1))}"
    elif [ $((now - last_report)) -ge 60 ]; then
      printf '%s\n' "$status"
      last_report=$now
    fi
  done
  wait "$pid" || rc=$?
  local took=$(($(date +%s) - start))
  if [ "$rc" -ne 0 ]; then
    [ -z "$TTY" ] || printf '\r\033[K'
    printf '      FAILED after %s (exit %d). The last lines of %s:\n' "$(mmss "$took")" "$rc" "${LOG#"$ROOT"/}" >&2
    tail -n 25 "$LOG" | sed 's/^/    /' >&2
    printf 'Fix what it says, then run make demo again: what was built is kept.\n' >&2
    exit "$rc"
  fi
  record "$key" "$took"
  [ -z "$TTY" ] || printf '\r\033[K'
  printf '      done in %s\n' "$(mmss "$took")"
}

if [ "$NODE" = real ]; then
  expected=$(($(estimate go) + $(estimate execplane) + $(estimate cluster) + $(estimate node)))
else
  expected=$(($(estimate go) + $(estimate execplane) + $(estimate cluster-kwok)))
fi
echo "make demo: building what it runs (the first time here: about $(((expected + 30) / 60)) min; then seconds). The go commands' output: ${LOG#"$ROOT"/}"

# The tools modules' downloads go on beside the first compilations (the network beside the
# cores); a build that needs a module first fetches it itself, so nothing waits for these.
fetch_tools() {
  GOTOOLCHAIN=$TOOLCHAIN GOFLAGS=-mod=readonly
  export GOTOOLCHAIN GOFLAGS
  (cd hack/kube-tools && go list -deps . >/dev/null)
  (cd hack/etcd-tools && go list -deps go.etcd.io/etcd/server/v3 >/dev/null)
  if [ "$NODE" = real ]; then
    (cd hack/containerd-tools && go list -deps github.com/containerd/containerd/v2/cmd/containerd \
      github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 github.com/containerd/containerd/v2/cmd/ctr >/dev/null)
  else
    (cd hack/kwok-tools && go list -deps sigs.k8s.io/kwok/cmd/kwok >/dev/null)
  fi
}

# The Debian packages (apt and the executor image's pinned .debs) beside the builds too:
# debian starts them, debian_wait waits for them and answers as they did.
debian() {
  ( rc=0; "$MAKE" --no-print-directory -s node-packages executor-debs >"$LOG.debian" 2>&1 || rc=$?; echo "$rc" >"$LOG.debian.rc" ) &
  echo $! >"$LOG.debian.pid"
}
debian_wait() {
  local pid
  pid=$(cat "$LOG.debian.pid")
  while [ ! -s "$LOG.debian.rc" ] && kill -0 "$pid" 2>/dev/null; do sleep 1; done
  cat "$LOG.debian"
  # Gone without its answer (killed): a failure.
  [ -s "$LOG.debian.rc" ] || return 1
  return "$(cat "$LOG.debian.rc")"
}
# A failed stage ends the script: the jobs beside it end with it.
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT

modules() {
  GOTOOLCHAIN=$TOOLCHAIN go version
  fetch_tools >>"$LOG.fetch" 2>&1 &
  echo $! >"$LOG.fetch.pid"
  GOTOOLCHAIN=$TOOLCHAIN go list -deps ./cmd/... ./internal/dev/pause >/dev/null
}

verbose() { GOFLAGS="$(GOTOOLCHAIN=local go env GOFLAGS) -v" EXECPLANE_BUILD_VERBOSE=1 "$@"; }

: >"$LOG.fetch"
rm -f "$LOG.debian.rc" "$LOG.debian.pid"
stage go "the Go toolchain ($TOOLCHAIN) and execplane's modules" modules
[ "$NODE" != real ] || debian
stage execplane "execplane: gateway, controller, e2b, execctl, execplane-dev, helper, pause" \
  verbose "$MAKE" --no-print-directory build bin/pause
if [ "$NODE" = real ]; then
  stage cluster "the local cluster: etcd; Kubernetes in one binary (kube-apiserver, -controller-manager, -scheduler, kubelet, kube-proxy)" \
    verbose hack/build-cluster-bins.sh core
  stage node "the real node: containerd, containerd-shim-runc-v2, ctr" verbose hack/build-node-bins.sh
  stage debian "Debian packages: runc, the CNI plugins, busybox; the executor image's" \
    debian_wait
else
  stage cluster-kwok "the local cluster: etcd; Kubernetes in one binary (kube-apiserver, -controller-manager, -scheduler); KWOK" \
    verbose hack/build-cluster-bins.sh core kwok
fi
# The downloads beside the builds are done by now (each build fetched what it lacked).
while kill -0 "$(cat "$LOG.fetch.pid")" 2>/dev/null; do sleep 1; done
cat "$LOG.fetch" >>"$LOG"
rm -f "$LOG.fetch" "$LOG.fetch.pid" "$LOG.debian" "$LOG.debian.rc" "$LOG.debian.pid"
echo "make demo: built in $(mmss $(($(date +%s) - total_start)))"
