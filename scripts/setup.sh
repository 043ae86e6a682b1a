#!/usr/bin/env bash
# Installs every Debian package Tandem needs, then the project's venv
# (.venv, from Debian's python3) with the pinned torch wheel of
# scripts/requirements-torch.txt, whose LibTorch Tandem builds against.
# Idempotent: a second run only checks (seconds, nothing downloaded).
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libzmq3-dev cppzmq-dev
  libgloo-dev  # headers only: they declare the types c10d's Gloo header names
  libcli11-dev nlohmann-json3-dev libspdlog-dev libfmt-dev
  zlib1g-dev libgtest-dev libgmock-dev libbenchmark-dev
  dataset-fashion-mnist
  openmpi-bin
  python3-venv python3-dev
  libgoogle-perftools-dev
  libprotobuf-dev protobuf-compiler
  libjpeg62-turbo-dev libpng-dev
  iproute2 python3-matplotlib
  clang libclang-rt-14-dev
  ccache  # the sanitizer trees compile through it (scripts/sanitize.sh)
  slurmctld slurmd slurm-client munge  # a real one-node Slurm, started by its test (tests/slurm)
  openssh-server openssh-client  # launch --hosts over ssh: its test starts its own sshd (tests/ssh)
)

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} > 0)); then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  # Slurm's and munge's daemons are the tests' to start, with their own
  # files: their packages must not start system ones. A policy-rc.d that
  # denies every start (Debian's way) stands for the install, unless one is there.
  guard=""
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    guard=/usr/sbin/policy-rc.d
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$guard" >/dev/null
    $SUDO chmod 755 "$guard"
  fi
  status=0
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" || status=$?
  if [[ -n $guard ]]; then $SUDO rm -f "$guard"; fi
  if ((status != 0)); then exit "$status"; fi
fi
echo "setup: ${#PACKAGES[@]} Debian packages present"

# The venv: installed again only when the pinned list changes (a stamp
# holds the list it was made from); pip leaves what already matches alone.
VENV=${TANDEM_VENV:-$PWD/.venv}
REQUIREMENTS=scripts/requirements-torch.txt
TEST_REQUIREMENTS=scripts/requirements-test.txt  # Ray Train, for tandem.ray's test
STAMP=$VENV/.tandem-requirements
if [[ -x "$VENV/bin/python" ]] && cat "$REQUIREMENTS" "$TEST_REQUIREMENTS" | cmp -s - "$STAMP"; then
  echo "setup: venv $VENV up to date ($(grep -m1 '^torch==' "$REQUIREMENTS"))"
  exit 0
fi
start=$(date +%s)
if [[ ! -x "$VENV/bin/python" ]]; then
  /usr/bin/python3 -m venv "$VENV"
fi
echo "setup: installing $(grep -v '^#' "$REQUIREMENTS" | tr '\n' ' ')into $VENV (about 3.1 GB to download the first time)"
"$VENV/bin/pip" install --quiet --progress-bar off -r "$REQUIREMENTS"
# After torch, so that Ray's dependencies never swap the pinned one.
"$VENV/bin/pip" install --quiet --progress-bar off -r "$TEST_REQUIREMENTS"
cat "$REQUIREMENTS" "$TEST_REQUIREMENTS" >"$STAMP"
echo "setup: venv ready in $(( $(date +%s) - start )) s, $(du -sh "$VENV" | cut -f1)"
