# Sourced by the tests of `tandem launch --hosts`: two hosts on loopback,
# 127.0.0.2 and 127.0.0.3, served by one sshd of Debian's openssh-server
# on a free port, with a host key and a client key made for the test.
# Skips (exit 77) without root or sshd. Exports SSH_PORT, and SSH_FLAGS
# (launch's --ssh-* flags: the key, and a known_hosts file of the test's
# own so the user's is not touched). Stops sshd and removes $dir on exit,
# failed or not. Defines fail(). Set `test_name` before sourcing.
export PATH=$PATH:/usr/sbin:/sbin
if [[ $(id -u) -ne 0 ]] || [[ ! -x /usr/sbin/sshd ]] || ! command -v ssh-keygen >/dev/null; then
  echo "$test_name: skipped: the test's sshd needs root and Debian's openssh-server"
  exit 77
fi
dir=$(mktemp -d)
sshd_pid=""
stop_sshd() {
  if [[ -n $sshd_pid ]]; then
    kill "$sshd_pid" 2>/dev/null || true
    wait "$sshd_pid" 2>/dev/null || true
  fi
  rm -rf "$dir"
}
trap stop_sshd EXIT
fail() { echo "$test_name: $*" >&2; [[ -f $dir/sshd.log ]] && tail -n 20 "$dir/sshd.log" >&2; exit 1; }

ssh-keygen -q -t ed25519 -N '' -f "$dir/host_key" >/dev/null
ssh-keygen -q -t ed25519 -N '' -f "$dir/client_key" >/dev/null
cp "$dir/client_key.pub" "$dir/authorized_keys"
chmod 600 "$dir/authorized_keys"
SSH_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.2", 0)); print(s.getsockname()[1])')
export SSH_PORT
mkdir -p /run/sshd  # privilege separation; Debian's unit makes it, the test has no unit
cat > "$dir/sshd_config" <<CONF
ListenAddress 127.0.0.2:$SSH_PORT
ListenAddress 127.0.0.3:$SSH_PORT
HostKey $dir/host_key
AuthorizedKeysFile $dir/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PidFile $dir/sshd.pid
PermitUserEnvironment no
MaxStartups 100
MaxSessions 100
CONF
/usr/sbin/sshd -D -e -f "$dir/sshd_config" 2>"$dir/sshd.log" &
sshd_pid=$!
for host in 127.0.0.2 127.0.0.3; do
  echo "[$host]:$SSH_PORT $(cut -d' ' -f1,2 "$dir/host_key.pub")" >>"$dir/known_hosts"
done
SSH_FLAGS="--ssh-port $SSH_PORT --ssh-identity-file $dir/client_key --ssh-option UserKnownHostsFile=$dir/known_hosts"
export SSH_FLAGS
for _ in $(seq 100); do
  if ssh -T -o BatchMode=yes -p "$SSH_PORT" -i "$dir/client_key" -o UserKnownHostsFile="$dir/known_hosts" \
       127.0.0.3 true 2>/dev/null; then
    break
  fi
  kill -0 "$sshd_pid" 2>/dev/null || fail "sshd did not start"
  sleep 0.1
done
