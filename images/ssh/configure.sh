#!/bin/sh
# Lets the non-root user (uid 1000) run sshd for the MPI Operator, as its non-root setup does:
# the operator mounts the job's keys at sshAuthMountPath (/home/distrain/.ssh), so
# host-key checks against known_hosts and StrictModes are off, and sshd listens on 2222.
set -eu
port=2222
sed -i "s/[ #]\(.*StrictHostKeyChecking \).*/ \1no/g" /etc/ssh/ssh_config
echo "    UserKnownHostsFile /dev/null" >> /etc/ssh/ssh_config
sed -i "s/[ #]\(.*Port \).*/ \1$port/g" /etc/ssh/ssh_config
mkdir -p /home/distrain
cat > /home/distrain/.sshd_config <<CONF
Port $port
PidFile /home/distrain/sshd.pid
HostKey /home/distrain/.ssh/id_rsa
StrictModes no
CONF
chown 1000:1000 /home/distrain/.sshd_config
