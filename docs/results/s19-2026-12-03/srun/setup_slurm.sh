#!/bin/bash
# A one-node Slurm inside the CPU container (Debian 12: slurm-wlm 22.05.8, munge 0.5.15; no systemd, the daemons
# are started by hand as root). Session 19, 2026-12-03. Usage: setup_slurm.sh start|stop
set -eu
here=$(cd "$(dirname "$0")" && pwd)
case "${1:-start}" in
start)
  command -v slurmctld >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends slurm-wlm munge
  # slurm.conf: NodeName must be the host's short name (`hostname -s`: vm here), CPUs=2;
  # proctrack/linuxproc and task/none need no cgroups (the container is gVisor: no usable cgroup v2 controllers).
  sed "s/^NodeName=vm /NodeName=$(hostname -s) /; s/^SlurmctldHost=vm(/SlurmctldHost=$(hostname -s)(/" \
    "$here/slurm.conf" > /etc/slurm/slurm.conf
  mkdir -p /var/spool/slurm/ctld /var/spool/slurm/d /var/log/slurm /run/munge
  chown munge:munge /run/munge
  [ -f /etc/munge/munge.key ] || { dd if=/dev/urandom of=/etc/munge/munge.key bs=128 count=1; chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key; }
  su -s /bin/sh munge -c /usr/sbin/munged          # daemonizes; pid in /run/munge/munged.pid
  slurmctld                                        # daemonizes; pid in /run/slurmctld.pid
  sleep 2
  slurmd                                           # daemonizes; pid in /run/slurmd.pid
  for i in $(seq 20); do sinfo -h -o %T 2>/dev/null | grep -q idle && break; sleep 1; done
  scontrol ping; sinfo; srun --mpi=list
  ;;
stop)
  # Let finished steps report to slurmctld first (a slurmstepd whose controller is gone lingers ~20 s).
  for i in $(seq 30); do [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 1; done
  for f in /run/slurmd.pid /run/slurmctld.pid /run/munge/munged.pid; do
    [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true
  done
  alive() { for n in slurmd slurmctld slurmstepd munged; do pgrep -ax "$n"; done; }
  for i in $(seq 30); do [ -z "$(alive)" ] && break; sleep 1; done
  [ -z "$(alive)" ] && echo "no slurmd, slurmctld, slurmstepd or munged left" || alive
  ;;
esac
